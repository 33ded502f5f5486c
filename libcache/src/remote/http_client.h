// HTTP requests over libcurl with dscache's retry policy (backoff.h) and, for S3, SigV4
// signatures (curl's CURLOPT_AWS_SIGV4 plus the x-amz-content-sha256 header curl 7.88 leaves
// out). Thread-safe: each thread keeps its own curl easy handle (and so its own connections).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "remote/aws_config.h"

namespace dscache {
namespace remote {

struct HttpRequest {
  std::string method = "GET";         // GET, HEAD, PUT, POST, DELETE
  std::string url;                    // percent-encoded, with its canonical query (location.h)
  std::vector<std::string> headers;   // "Name: value"
  const std::string* body = nullptr;  // PUT/POST payload; must outlive send()
  // Where a 2xx response's body goes instead of HttpResponse::body (get_to_fd). It may throw;
  // the exception ends the request and is rethrown by send().
  std::function<void(const char*, size_t)> sink;
  // Called before a retry once `sink` has received bytes, to start the body over; without it
  // such a request is not retried.
  std::function<void()> restart;
};

struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  // names lower-case
  std::string body;                            // error bodies are kept up to 64 KiB
  std::string header(const std::string& lower_name) const;
};

struct HttpSettings {
  std::string endpoint;  // for messages: where requests go, no credential
  int retries = 5;       // attempts after the first
  double stall_timeout_s = 30;
  std::string region;             // SigV4 scope when credentials are present
  Credentials credentials;        // empty: unsigned requests
  bool follow_redirects = false;  // plain HTTP(S) only: a signed request never follows one
};

class HttpClient {
 public:
  explicit HttpClient(HttpSettings settings);

  // Sends `request`, retrying timeouts, resets, refused connections and 429/5xx answers. Returns
  // the final response whatever its status (the caller decides what a 404 means); throws
  // Error(kRemote, what, ...) when the retries are spent, naming the status or the cause, the
  // endpoint and the number of attempts. `what` is the user-facing URL (s3://bucket/key).
  HttpResponse send(const HttpRequest& request, const std::string& what) const;

  // Throws the Error a non-2xx response means: kNotFound for 404, else kRemote with the status,
  // the S3 error code and message, the endpoint, and for 401/403 the credentials used.
  [[noreturn]] void fail(const std::string& what, const HttpResponse& response) const;

  const HttpSettings& settings() const { return settings_; }

 private:
  std::string scrub(std::string text) const;
  [[noreturn]] void throw_remote(const std::string& what, const std::string& reason) const;

  HttpSettings settings_;
};

// SHA-256 of `data` as 64 lower-case hex digits (the x-amz-content-sha256 value).
std::string sha256_hex(const std::string& data);

}  // namespace remote
}  // namespace dscache
