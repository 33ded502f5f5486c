// list_remote, stat_remote and read_remote (dscache/remote.h): object storage for the build's
// sources, one store per bucket or host shared by every thread.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dscache/error.h"
#include "dscache/remote.h"
#include "remote/location.h"
#include "remote/object_store.h"
#include "remote/parallel.h"
#include "remote/stores.h"

namespace dscache {

namespace {

// The root of the bucket (s3://BUCKET) or host (http(s)://HOST[:PORT]) a URL names, and the key
// under it.
std::pair<std::string, std::string> split_url(const std::string& url) {
  const size_t scheme = url.find("://");
  const size_t slash = scheme == std::string::npos ? std::string::npos : url.find('/', scheme + 3);
  if (slash == std::string::npos || slash + 1 >= url.size()) {
    throw Error(ErrorKind::kInvalidArgument, url,
                "expected s3://BUCKET/KEY or http(s)://HOST/PATH");
  }
  return {url.substr(0, slash), url.substr(slash + 1)};
}

// The store of the bucket or host a URL names, and the key under it. Stores are thread-safe and
// kept for the process's life: opening one resolves credentials (reads ~/.aws), too slow to
// repeat for each of a million source files.
std::pair<remote::ObjectStore*, std::string> store_for(const std::string& url) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<remote::ObjectStore>> stores;
  auto [root, key] = split_url(url);
  std::lock_guard<std::mutex> g(mu);
  auto& store = stores[root];
  if (!store) store = remote::ObjectStore::open(root);
  return {store.get(), key};
}

// The longest prefix of every key that ends at a '/' ("" when they share no folder).
std::string common_folder(const std::vector<std::string>& keys) {
  std::string prefix = keys.front();
  for (const std::string& k : keys) {
    const auto end = std::mismatch(prefix.begin(), prefix.end(), k.begin(), k.end()).first;
    prefix.erase(end, prefix.end());
  }
  const size_t slash = prefix.rfind('/');
  return slash == std::string::npos ? "" : prefix.substr(0, slash + 1);
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

std::vector<std::optional<RemoteObject>> stat_remote(const std::vector<std::string>& urls) {
  std::vector<std::optional<RemoteObject>> out(urls.size());
  std::map<std::string, std::vector<size_t>> by_store;  // store root -> indexes into urls
  for (size_t i = 0; i < urls.size(); ++i) by_store[split_url(urls[i]).first].push_back(i);
  for (const auto& [root, which] : by_store) {
    remote::ObjectStore* store = store_for(urls[which.front()]).first;
    std::vector<std::string> keys;
    keys.reserve(which.size());
    for (size_t i : which) keys.push_back(split_url(urls[i]).second);
    if (remote::parse_location(root).scheme == remote::Location::Scheme::kS3) {
      std::unordered_map<std::string, RemoteObject> listed;
      for (remote::ObjectInfo& o : store->list(common_folder(keys))) {
        listed.emplace(o.key, RemoteObject{o.key, o.size, std::move(o.etag)});
      }
      for (size_t k = 0; k < keys.size(); ++k) {
        auto it = listed.find(keys[k]);
        if (it != listed.end()) out[which[k]] = it->second;
      }
      continue;
    }
    const unsigned threads = remote::resolve_limits(remote_options(), root).requests_in_flight;
    remote::parallel_for(keys.size(), threads, [&](size_t k) {
      if (std::optional<remote::ObjectInfo> o = store->head(keys[k])) {
        out[which[k]] = RemoteObject{keys[k], o->size, o->etag};
      }
    });
  }
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
