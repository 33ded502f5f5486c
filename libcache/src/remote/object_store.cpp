// ObjectStore::open and what both stores share (stores.h), in a build with libcurl.
#include <cstdlib>
#include <string>

#include "dscache/error.h"
#include "remote/stores.h"

namespace dscache {
namespace remote {

std::unique_ptr<ObjectStore> ObjectStore::open(const std::string& location) {
  return open(location, remote_options());
}

std::unique_ptr<ObjectStore> ObjectStore::open(const std::string& location,
                                               const RemoteOptions& options) {
  Location parsed = parse_location(location);
  if (parsed.scheme == Location::Scheme::kS3) return make_s3_store(parsed, location, options);
  return make_http_store(parsed, options);
}

Limits resolve_limits(const RemoteOptions& options, const std::string& location) {
  Limits l;
  if (options.requests_in_flight != 0) l.requests_in_flight = options.requests_in_flight;
  if (options.retries >= 0) {
    l.retries = options.retries;
  } else if (const char* env = std::getenv("DSCACHE_REMOTE_RETRIES"); env && *env) {
    char* end = nullptr;
    long v = std::strtol(env, &end, 10);
    if (*end != '\0' || v < 0 || v > 100) {
      throw Error(ErrorKind::kInvalidArgument, location,
                  std::string("DSCACHE_REMOTE_RETRIES='") + env + "' is not a number 0-100");
    }
    l.retries = static_cast<int>(v);
  }
  if (options.stall_timeout_s < 0) {
    throw Error(ErrorKind::kInvalidArgument, location, "stall_timeout_s is negative");
  }
  if (options.stall_timeout_s > 0) l.stall_timeout_s = options.stall_timeout_s;
  if (options.multipart_threshold != 0) l.multipart_threshold = options.multipart_threshold;
  if (options.part_bytes != 0) l.part_bytes = options.part_bytes;
  if (l.part_bytes < (5ull << 20)) {
    throw Error(
        ErrorKind::kInvalidArgument, location,
        "part_bytes " + std::to_string(l.part_bytes) + " is below S3's least part size of 5 MiB");
  }
  return l;
}

ObjectInfo info_from_headers(const std::string& key, const HttpResponse& response) {
  ObjectInfo info;
  info.key = key;
  info.size = std::strtoull(response.header("content-length").c_str(), nullptr, 10);
  std::string etag = response.header("etag");
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  info.etag = etag;
  info.xxh64 = response.header("x-amz-meta-xxh64");
  return info;
}

void check_range_response(const HttpClient& client, const std::string& what, const HttpResponse& r,
                          uint64_t offset, uint64_t length) {
  if (r.status < 200 || r.status >= 300) client.fail(what, r);
  const std::string range =
      "bytes " + std::to_string(offset) + "-" + std::to_string(offset + length - 1) + "/";
  std::string got = r.header("content-range");
  std::string problem;
  if (r.status != 206) {
    problem = "HTTP " + std::to_string(r.status) + " to a Range request (206 expected)";
  } else if (got.compare(0, range.size(), range) != 0) {
    problem = "Content-Range '" + got + "' where '" + range + "...' was asked";
  } else if (r.body.size() != length) {
    problem =
        std::to_string(r.body.size()) + " bytes where " + std::to_string(length) + " were asked";
  }
  if (!problem.empty()) {
    throw Error(ErrorKind::kRemote, what,
                "bytes " + std::to_string(offset) + "+" + std::to_string(length) + ": " + problem +
                    " from " + client.settings().endpoint);
  }
}

}  // namespace remote
}  // namespace dscache
