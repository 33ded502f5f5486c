// ObjectStore::open in a build without libcurl (meson feature `remote` off or not found): every
// remote location is refused with Error(kUnsupported) that says what the build lacks.
#include "dscache/error.h"
#include "remote/location.h"
#include "remote/object_store.h"

namespace dscache {
namespace remote {

std::unique_ptr<ObjectStore> ObjectStore::open(const std::string& location) {
  return open(location, remote_options());
}

std::unique_ptr<ObjectStore> ObjectStore::open(const std::string& location, const RemoteOptions&) {
  parse_location(location);  // a malformed location is still InvalidArgument, as with libcurl
  throw Error(ErrorKind::kUnsupported, location,
              "this build of libcache has no object storage support (meson feature remote: "
              "libcurl)");
}

}  // namespace remote
}  // namespace dscache
