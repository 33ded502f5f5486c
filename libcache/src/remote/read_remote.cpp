// list_remote and read_remote (dscache/remote.h): object storage for the build's sources, one
// store per bucket or host shared by every thread.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "dscache/remote.h"
#include "remote/location.h"
#include "remote/object_store.h"

namespace dscache {

namespace {

// The store of the bucket (s3://BUCKET) or host (http(s)://HOST[:PORT]) a URL names, and the
// key under it. Stores are thread-safe and kept for the process's life: opening one resolves
// credentials (reads ~/.aws), too slow to repeat for each of a million source files.
std::pair<remote::ObjectStore*, std::string> store_for(const std::string& url) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<remote::ObjectStore>> stores;
  const size_t scheme = url.find("://");
  const size_t slash = scheme == std::string::npos ? std::string::npos : url.find('/', scheme + 3);
  if (slash == std::string::npos || slash + 1 >= url.size()) {
    throw Error(ErrorKind::kInvalidArgument, url,
                "expected s3://BUCKET/KEY or http(s)://HOST/PATH");
  }
  const std::string root = url.substr(0, slash);
  std::lock_guard<std::mutex> g(mu);
  auto& store = stores[root];
  if (!store) store = remote::ObjectStore::open(root);
  return {store.get(), url.substr(slash + 1)};
}

}  // namespace

std::vector<RemoteObject> list_remote(const std::string& location) {
  std::string where = location;
  while (where.size() > 1 && where.back() == '/') where.pop_back();
  auto store = remote::ObjectStore::open(where);
  std::vector<RemoteObject> out;
  for (const remote::ObjectInfo& o : store->list("")) out.push_back({o.key, o.size, o.etag});
  return out;
}

std::string read_remote(const std::string& url, std::vector<uint8_t>* out) {
  auto [store, key] = store_for(url);
  std::string bytes;
  const remote::ObjectInfo info = store->get(key, &bytes);
  out->assign(bytes.begin(), bytes.end());
  return info.etag;
}

}  // namespace dscache
