// HttpStore: an http(s):// location, read-only, unsigned (stores.h). A plain web server has no
// listing and takes no writes, so those throw Error(kUnsupported) naming the URL.
#include "dscache/error.h"
#include "remote/stores.h"

namespace dscache {
namespace remote {

namespace {

class HttpStore : public ReadingStore {
 public:
  HttpStore(const Location& location, const Limits& limits)
      : ReadingStore(HttpSettings{location.base, limits.retries, limits.stall_timeout_s, "",
                                  Credentials{}, true}),
        base_(location.base) {}

  std::string url(const std::string& key) const override { return base_ + "/" + key; }
  bool writable() const override { return false; }
  void put(const std::string& key, const std::string&, const std::string&) override {
    unsupported(key, "uploading");
  }
  void put_file(const std::string& key, const std::string&, const std::string&) override {
    unsupported(key, "uploading");
  }
  std::vector<ObjectInfo> list(const std::string& prefix) override {
    unsupported(prefix, "listing");
  }
  void remove(const std::string& key) override { unsupported(key, "removing"); }

 protected:
  std::string request_url(const std::string& key, const std::string& query) const override {
    std::string u = base_ + "/" + uri_encode(key, true);
    return query.empty() ? u : u + "?" + query;
  }

 private:
  [[noreturn]] void unsupported(const std::string& key, const std::string& what) const {
    throw Error(ErrorKind::kUnsupported, url(key),
                what + " needs object storage (s3://); an http(s):// location is read-only");
  }

  std::string base_;
};

}  // namespace

std::unique_ptr<ObjectStore> make_http_store(const Location& location,
                                             const RemoteOptions& options) {
  return std::make_unique<HttpStore>(location, resolve_limits(options, location.base));
}

}  // namespace remote
}  // namespace dscache
