// Remote locations: caches on object storage (s3://BUCKET/PREFIX) or a web server
// (http(s)://HOST/PATH), served through a verified local copy (docs/OPERATIONS.md, "Caches on
// object storage").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dscache {

// True for "s3://...", "http://..." and "https://..." (the scheme case-insensitive).
bool is_remote_location(const std::string& path);

// How this process reaches object storage and where it keeps local copies. Empty / zero fields
// fall back to the environment, then to the defaults given.
struct RemoteOptions {
  // S3 endpoint, e.g. "http://127.0.0.1:7480". Empty: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the
  // profile's endpoint_url, else https://s3.<region>.amazonaws.com.
  std::string endpoint;
  // Empty: AWS_REGION, AWS_DEFAULT_REGION, the profile's region, else "us-east-1".
  std::string region;
  // Empty: AWS_PROFILE, else "default" (for ~/.aws/credentials and ~/.aws/config).
  std::string profile;
  // "path" (https://endpoint/BUCKET/KEY), "virtual" (https://BUCKET.endpoint/KEY) or empty:
  // AWS_S3_ADDRESSING_STYLE, else path-style for a custom endpoint and virtual on AWS.
  std::string addressing;
  // The local cache directory. Empty: DSCACHE_LOCAL_CACHE, $XDG_CACHE_HOME/dscache,
  // else $HOME/.cache/dscache.
  std::string local_cache;
  // Most bytes of local copies kept; 0: DSCACHE_LOCAL_CACHE_SIZE, else 20 GiB.
  uint64_t local_cache_size = 0;
  // Concurrent requests while downloading or uploading; 0: 8.
  unsigned requests_in_flight = 0;
  // Attempts after the first on a timeout, reset, 429 or 5xx, with capped exponential backoff
  // and jitter (Retry-After honoured); -1: DSCACHE_REMOTE_RETRIES, else 5.
  int retries = -1;
  // Seconds a request may stall (no byte moved) before it counts as timed out; 0: 30.
  double stall_timeout_s = 0;
  // Objects at least this large are uploaded in parts of part_bytes; 0: 64 MiB and 16 MiB.
  uint64_t multipart_threshold = 0;
  uint64_t part_bytes = 0;
};

// The process-wide options every remote open uses (the commands' --s3-endpoint, --local-cache,
// --local-cache-size; Python's dscache.remote_options). Thread-safe.
void set_remote_options(const RemoteOptions& options);
RemoteOptions remote_options();

// Whether `location` holds a cache (its manifest.json exists). Error(kRemote) when the store
// cannot be asked.
bool remote_cache_exists(const std::string& location);

// One object under a remote location (list_remote).
struct RemoteObject {
  std::string key;  // relative to the location
  uint64_t size = 0;
  std::string etag;  // as the server sent it, quotes removed
};

// Every object under `location` (s3:// only: ListObjectsV2, page by page), in key order.
std::vector<RemoteObject> list_remote(const std::string& location);

// What object storage holds at each of `urls` (s3://BUCKET/KEY, http(s)://HOST/PATH), in order:
// the object (key: the URL's key in its bucket, or its path on its host), or nullopt where there
// is none. The s3:// URLs of one bucket are looked up in one ListObjectsV2 listing of the longest
// folder prefix their keys share (a table naming a million images costs a thousand pages, not a
// million requests); http(s):// ones, which cannot be listed, with a HEAD each,
// RemoteOptions::requests_in_flight at a time. Error(kRemote, ...) when a store cannot be asked.
std::vector<std::optional<RemoteObject>> stat_remote(const std::vector<std::string>& urls);

// The whole object at `url` (s3://BUCKET/KEY, http(s)://HOST/PATH) into *out; returns its ETag.
// Connections and credentials are shared by all calls for one bucket or host. Thread-safe.
std::string read_remote(const std::string& url, std::vector<uint8_t>* out);

// Where `dscache build SRC s3://...` builds before it uploads: a directory of the local cache
// named after the location, so that --resume finds the interrupted build or upload again.
std::string upload_staging_dir(const std::string& location);

struct UploadStats {
  uint64_t files_uploaded = 0;
  uint64_t bytes_uploaded = 0;
  uint64_t files_kept = 0;  // already there with the same size and XXH64 (a resumed upload)
  uint64_t bytes_kept = 0;
};

// Uploads the cache directory `dir` to `location` (S3 only): the shards and field files, then
// the other named files, then manifest.json last, so that a reader never sees a half-written
// cache. An object already there with the file's size and XXH64 (x-amz-meta-xxh64, which every
// upload sets) is kept, so an interrupted upload continues where it stopped. Each file is
// checked against the manifest before it is sent. Error(kUnsupported) for http(s) locations.
UploadStats upload_cache(const std::string& dir, const std::string& location);

}  // namespace dscache
