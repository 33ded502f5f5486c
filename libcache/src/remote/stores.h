// The two ObjectStore implementations behind ObjectStore::open: S3Store (s3://, SigV4) and
// HttpStore (http(s)://, read-only). Internal to libcache's remote/ folder.
#pragma once

#include <memory>
#include <string>

#include "remote/http_client.h"
#include "remote/location.h"
#include "remote/object_store.h"

namespace dscache {
namespace remote {

// RemoteOptions with every zero / empty field given its environment value or default (the
// S3-specific ones, region, endpoint and credentials, are resolved by aws_config.h).
struct Limits {
  unsigned requests_in_flight = 8;
  int retries = 5;
  double stall_timeout_s = 30;
  uint64_t multipart_threshold = 64ull << 20;
  uint64_t part_bytes = 16ull << 20;
};
// Throws Error(kInvalidArgument, location, ...) naming the field: part_bytes below S3's 5 MiB
// least part, a negative stall timeout, an unreadable DSCACHE_REMOTE_RETRIES.
Limits resolve_limits(const RemoteOptions& options, const std::string& location);

// What S3 and plain HTTP(S) stores share: the reads, given where a key's requests go.
class ReadingStore : public ObjectStore {
 public:
  explicit ReadingStore(HttpSettings settings) : client_(std::move(settings)) {}
  std::string endpoint() const override { return client_.settings().endpoint; }
  std::string credentials_used() const override {
    return client_.settings().credentials.describe();
  }
  std::optional<ObjectInfo> head(const std::string& key) override;
  std::string get(const std::string& key) override;
  ObjectInfo get(const std::string& key, std::string* bytes) override;
  std::string get_range(const std::string& key, uint64_t offset, uint64_t length) override;
  ObjectInfo get_to_fd(const std::string& key, int fd, const std::string& fd_path) override;

 protected:
  // The percent-encoded URL of `key`'s requests, with `query` (canonical_query()) when not "".
  virtual std::string request_url(const std::string& key, const std::string& query) const = 0;
  HttpClient client_;
};

std::unique_ptr<ObjectStore> make_s3_store(const Location& location, const std::string& text,
                                           const RemoteOptions& options);
std::unique_ptr<ObjectStore> make_http_store(const Location& location,
                                             const RemoteOptions& options);

// The ObjectInfo a HEAD or GET response describes (size from Content-Length, ETag unquoted,
// x-amz-meta-xxh64).
ObjectInfo info_from_headers(const std::string& key, const HttpResponse& response);

// Checks a ranged GET's answer: 206 whose Content-Range starts at `offset` and whose body holds
// `length` bytes; throws Error(kRemote, what, ...) otherwise (a 200 means the server ignored
// the Range, and serving the whole object in its place would be wrong).
void check_range_response(const HttpClient& client, const std::string& what,
                          const HttpResponse& response, uint64_t offset, uint64_t length);

}  // namespace remote
}  // namespace dscache
