// ObjectStore: the requests dscache makes of object storage, over libcurl. S3 (SigV4-signed,
// path-style or virtual-host addressing) for s3:// locations; plain HTTP(S) GET/HEAD with Range
// for http(s):// locations (read-only).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dscache/remote.h"

namespace dscache {
namespace remote {

struct ObjectInfo {
  std::string key;  // relative to the store's location (no leading '/')
  uint64_t size = 0;
  std::string etag;   // as the server sends it, quotes removed
  std::string xxh64;  // x-amz-meta-xxh64 when the object carries it (dscache uploads), else ""
};

// Thread-safe: every method may be called from any number of threads at once.
// Failures throw dscache::Error: kNotFound for a 404 of a key that must exist; kRemote for any
// other refusal (401/403 naming which credentials were used, never the secret) or for a request
// that still fails after RemoteOptions::retries (timeouts, resets, 429, 5xx); the path is the
// object's URL (s3://BUCKET/KEY or http(s)://...), the reason has the HTTP status and the
// endpoint. kUnsupported for a write to an http(s) location.
class ObjectStore {
 public:
  // `location`: s3://BUCKET[/PREFIX] or http(s)://HOST[:PORT][/PATH]; keys passed to the
  // methods are relative to it. Options: remote_options() unless given.
  static std::unique_ptr<ObjectStore> open(const std::string& location);
  static std::unique_ptr<ObjectStore> open(const std::string& location,
                                           const RemoteOptions& options);
  virtual ~ObjectStore() = default;

  // The object's user-facing name, for messages: "s3://bucket/prefix/key".
  virtual std::string url(const std::string& key) const = 0;
  // Where requests go (the endpoint, no credential), for messages.
  virtual std::string endpoint() const = 0;
  // Which credentials requests are signed with, e.g. "access key AKIA...WXYZ from
  // AWS_ACCESS_KEY_ID" or "profile 'ci' in /root/.aws/credentials"; "no credentials (unsigned
  // requests)" for http(s) or anonymous access. Never the secret.
  virtual std::string credentials_used() const = 0;
  virtual bool writable() const = 0;

  // nullopt when the object does not exist (404).
  virtual std::optional<ObjectInfo> head(const std::string& key) = 0;
  // The whole object in memory (manifests, small side files).
  virtual std::string get(const std::string& key) = 0;
  // The same, with what the response said of the object (size, ETag): one request, so the ETag
  // is that of the bytes received (a build compares it with its listing's).
  virtual ObjectInfo get(const std::string& key, std::string* bytes) = 0;
  // Bytes [offset, offset + length) of the object (206 Partial Content).
  virtual std::string get_range(const std::string& key, uint64_t offset, uint64_t length) = 0;
  // Streams the whole object into `fd` from its current position; returns what was received
  // (size, etag). `fd_path` names the file in messages.
  virtual ObjectInfo get_to_fd(const std::string& key, int fd, const std::string& fd_path) = 0;
  // Uploads `bytes` as the object (single PUT), with x-amz-meta-xxh64 when xxh64 is not empty.
  virtual void put(const std::string& key, const std::string& bytes,
                   const std::string& xxh64 = "") = 0;
  // Uploads the file at `path`: one PUT below RemoteOptions::multipart_threshold, else a
  // multipart upload (parts in parallel, aborted on failure). x-amz-meta-xxh64 as put().
  virtual void put_file(const std::string& key, const std::string& path,
                        const std::string& xxh64 = "") = 0;
  // Every object whose key starts with `prefix` (relative keys), ListObjectsV2 page by page.
  virtual std::vector<ObjectInfo> list(const std::string& prefix) = 0;
  virtual void remove(const std::string& key) = 0;
};

}  // namespace remote
}  // namespace dscache
