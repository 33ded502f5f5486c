// Uploading a cache to object storage (dscache/remote.h: upload_cache; in write/ since it opens
// the local cache with CacheDir, a level above remote/): data first, manifest
// last; objects already there with the same size and XXH64 are kept (resume).
#include <map>
#include <mutex>
#include <vector>

#include "dscache/atomic_file.h"
#include "dscache/cache_dir.h"
#include "dscache/checksum.h"
#include "dscache/error.h"
#include "dscache/file.h"
#include "dscache/manifest.h"
#include "dscache/remote.h"
#include "remote/mirror.h"
#include "remote/object_store.h"
#include "remote/parallel.h"

namespace dscache {

namespace {

constexpr unsigned kDefaultInFlight = 8;

std::string trimmed(std::string location) {
  while (location.size() > 1 && location.back() == '/') location.pop_back();
  return location;
}

}  // namespace

bool remote_cache_exists(const std::string& location) {
  auto store = remote::ObjectStore::open(trimmed(location));
  return store->head("manifest.json").has_value();
}

std::string upload_staging_dir(const std::string& location) {
  const std::string where = trimmed(location);
  return remote::local_cache_dir(remote_options()) + "/upload-" +
         hex64(xxh64(where.data(), where.size()));
}

UploadStats upload_cache(const std::string& dir, const std::string& location) {
  const std::string where = trimmed(location);
  const RemoteOptions options = remote_options();
  auto store = remote::ObjectStore::open(where, options);
  if (!store->writable()) {
    throw Error(ErrorKind::kUnsupported, where,
                "an http(s) location is read-only: upload to s3://BUCKET/PREFIX");
  }
  // The local cache as every reader checks it: nothing that would be refused is uploaded.
  auto files = CacheDir::open(dir);
  files->check_open();
  const Manifest& m = files->manifest();
  const std::vector<FileEntry> named = named_files(m);

  // What the bucket holds already (one listing, then a HEAD only where the size agrees).
  std::map<std::string, uint64_t> listed;
  for (const remote::ObjectInfo& o : store->list("")) listed[o.key] = o.size;

  UploadStats stats;
  std::mutex mu;
  const unsigned threads =
      options.requests_in_flight ? options.requests_in_flight : kDefaultInFlight;
  // Each file is uploaded by one request (a large one in parallel parts), so at most
  // `threads` files at once.
  remote::parallel_for(named.size(), threads, [&](size_t i) {
    const FileEntry& f = named[i];
    const std::string sum = hex64(f.xxh64);
    auto it = listed.find(f.file);
    if (it != listed.end() && it->second == f.bytes) {
      const auto info = store->head(f.file);
      if (info && info->size == f.bytes && info->xxh64 == sum) {
        std::lock_guard<std::mutex> g(mu);
        ++stats.files_kept;
        stats.bytes_kept += f.bytes;
        return;
      }
    }
    // The file as the manifest describes it (a local file changed since the build is refused).
    const File file = files->open_file(f.file, f.bytes);
    const FileEntry now = hash_file(file);
    if (now.xxh64 != f.xxh64) {
      throw Error(ErrorKind::kCorruption, files->path(f.file),
                  "XXH64 " + hex64(now.xxh64) + ", manifest says " + sum +
                      "; not uploaded (rebuild, or dscache verify the local cache)");
    }
    store->put_file(f.file, files->path(f.file), sum);
    std::lock_guard<std::mutex> g(mu);
    ++stats.files_uploaded;
    stats.bytes_uploaded += f.bytes;
  });
  // Last: the manifest, which makes the cache visible.
  const File mf = files->open_file("manifest.json");
  const std::string text = mf.read_all(mf.size());
  store->put("manifest.json", text, hex64(xxh64(text.data(), text.size())));
  ++stats.files_uploaded;
  stats.bytes_uploaded += text.size();
  return stats;
}

}  // namespace dscache
