// libcurl requests with retries and SigV4 (http_client.h).
#include "remote/http_client.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "dscache/error.h"
#include "remote/backoff.h"
#include "remote/s3_xml.h"

namespace dscache {
namespace remote {

namespace {

constexpr size_t kErrorBodyMax = 64 * 1024;

// curl_global_init is not thread-safe: once per process, before any handle.
void init_curl() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// One easy handle per thread, reset before each request: requests of a thread reuse its
// connections, and no handle is ever shared between threads (curl forbids that) or between
// processes: a process forked from one that made requests (a DataLoader worker) inherits the
// handle's open connection, and two processes reading one socket get each other's responses.
// The child abandons the inherited handle unclosed (a close could send a TLS alert on the
// parent's connection) and makes its own.
CURL* thread_handle() {
  struct Holder {
    CURL* handle = nullptr;
    pid_t pid = 0;
    ~Holder() {
      if (handle && pid == ::getpid()) curl_easy_cleanup(handle);
    }
  };
  thread_local Holder holder;
  if (holder.handle != nullptr && holder.pid != ::getpid()) holder.handle = nullptr;
  if (holder.handle == nullptr) {
    init_curl();
    holder.handle = curl_easy_init();
    if (holder.handle == nullptr) throw std::bad_alloc();
    holder.pid = ::getpid();
  } else {
    curl_easy_reset(holder.handle);
  }
  return holder.handle;
}

double unit_random() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

double now_s() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// What one attempt leaves behind; the callbacks write into it.
struct Attempt {
  const HttpRequest* request = nullptr;
  HttpResponse response;
  bool sink_used = false;
  std::exception_ptr sink_error;
  char errbuf[CURL_ERROR_SIZE] = {0};
};

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* a = static_cast<Attempt*>(user);
  std::string line(data, size * count);
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.pop_back();
  if (line.compare(0, 5, "HTTP/") == 0) {  // a new response (after 100 Continue, a redirect)
    a->response.headers.clear();
    size_t sp = line.find(' ');
    a->response.status = sp == std::string::npos ? 0 : std::atol(line.c_str() + sp + 1);
    return size * count;
  }
  size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    size_t v = line.find_first_not_of(" \t", colon + 1);
    a->response.headers[name] = v == std::string::npos ? "" : line.substr(v);
  }
  return size * count;
}

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto* a = static_cast<Attempt*>(user);
  size_t n = size * count;
  bool ok = a->response.status >= 200 && a->response.status < 300;
  if (ok && a->request->sink) {
    try {
      a->sink_used = true;
      a->request->sink(data, n);
    } catch (...) {
      a->sink_error = std::current_exception();
      return 0;  // aborts the transfer with CURLE_WRITE_ERROR
    }
  } else if (a->response.body.size() < kErrorBodyMax || ok) {
    a->response.body.append(data, n);
  }
  return n;
}

bool retryable_code(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

std::string describe_code(CURLcode code, const char* errbuf) {
  std::string what = code == CURLE_COULDNT_CONNECT      ? "connection refused or unreachable"
                     : code == CURLE_OPERATION_TIMEDOUT ? "timed out (stalled)"
                     : code == CURLE_RECV_ERROR || code == CURLE_SEND_ERROR ||
                             code == CURLE_GOT_NOTHING || code == CURLE_PARTIAL_FILE
                         ? "connection reset"
                         : curl_easy_strerror(code);
  if (errbuf[0] != '\0') what += " (" + std::string(errbuf) + ")";
  return what;
}

struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using Slist = std::unique_ptr<curl_slist, SlistDeleter>;

}  // namespace

std::string sha256_hex(const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("OpenSSL's SHA-256 failed");
  }
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

std::string HttpResponse::header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? "" : it->second;
}

HttpClient::HttpClient(HttpSettings settings) : settings_(std::move(settings)) {}

namespace {

// The per-attempt curl setup; returns the header list the handle points into.
Slist setup(CURL* h, const HttpRequest& req, const HttpSettings& s, Attempt& a) {
  curl_easy_setopt(h, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM-based DNS timeouts
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, a.errbuf);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &a);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &a);
  long stall = std::max(1L, static_cast<long>(s.stall_timeout_s + 0.5));
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, stall);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);  // a stall: under 1 byte/s for `stall` s
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, stall);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  if (s.follow_redirects && !s.credentials.present()) {
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
  }
  curl_slist* list = nullptr;
  for (const std::string& hdr : req.headers) list = curl_slist_append(list, hdr.c_str());
  if (req.method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (req.method != "GET") {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }
  static const std::string kEmpty;
  const std::string& body = req.body ? *req.body : kEmpty;
  if (req.method == "PUT" || req.method == "POST") {
    // The payload as POSTFIELDS (with the method overridden): curl signs the bytes it holds,
    // and this works whether or not a curl version reads x-amz-content-sha256 itself.
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.data());
  }
  if (s.credentials.present()) {
    const Credentials& c = s.credentials;
    std::string sigv4 = "aws:amz:" + s.region + ":s3";
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4.c_str());  // curl copies string options
    curl_easy_setopt(h, CURLOPT_USERNAME, c.access_key_id.c_str());
    curl_easy_setopt(h, CURLOPT_PASSWORD, c.secret_access_key.c_str());
    std::string hash = sha256_hex(body);
    list = curl_slist_append(list, ("x-amz-content-sha256: " + hash).c_str());
    if (!c.session_token.empty()) {
      list = curl_slist_append(list, ("x-amz-security-token: " + c.session_token).c_str());
    }
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, list);
  return Slist(list);
}

}  // namespace

HttpResponse HttpClient::send(const HttpRequest& request, const std::string& what) const {
  const int attempts = std::max(0, settings_.retries) + 1;
  for (int attempt = 1;; ++attempt) {
    CURL* h = thread_handle();
    Attempt a;
    a.request = &request;
    Slist headers = setup(h, request, settings_, a);
    CURLcode code = curl_easy_perform(h);
    if (a.sink_error) std::rethrow_exception(a.sink_error);
    bool retry_status = code == CURLE_OK && is_retryable_status(a.response.status);
    if (code == CURLE_OK && !retry_status) return std::move(a.response);
    if (code != CURLE_OK && !retryable_code(code)) {
      throw_remote(what, describe_code(code, a.errbuf) + " from " + settings_.endpoint);
    }
    if (attempt >= attempts || (a.sink_used && !request.restart)) {
      std::string cause = retry_status
                              ? "HTTP " + std::to_string(a.response.status) +
                                    (parse_error_body(a.response.body).code.empty()
                                         ? ""
                                         : " (" + parse_error_body(a.response.body).code + ")")
                              : describe_code(code, a.errbuf);
      throw_remote(what, cause + " from " + settings_.endpoint + " after " +
                             std::to_string(attempt) + (attempt == 1 ? " attempt" : " attempts"));
    }
    double delay = backoff_delay_s(attempt - 1, unit_random());
    if (auto ra = parse_retry_after(a.response.header("retry-after"), now_s())) {
      delay = std::max(delay, *ra);
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    if (a.sink_used) request.restart();
  }
}

void HttpClient::fail(const std::string& what, const HttpResponse& r) const {
  S3ErrorBody e = parse_error_body(r.body);
  std::string reason = "HTTP " + std::to_string(r.status);
  if (!e.code.empty()) reason += " " + e.code;
  reason += " from " + settings_.endpoint;
  if (!e.message.empty() && e.message != e.code) reason += ": " + e.message;
  if (r.status == 404) throw Error(ErrorKind::kNotFound, what, scrub(reason));
  if (r.status == 401 || r.status == 403) {
    reason += "; requests signed with " + settings_.credentials.describe();
  }
  throw_remote(what, reason);
}

void HttpClient::throw_remote(const std::string& what, const std::string& reason) const {
  throw Error(ErrorKind::kRemote, what, scrub(reason));
}

// A last guard: whatever a server or curl echoes, the secret and the session token never reach
// a message.
std::string HttpClient::scrub(std::string text) const {
  for (const std::string* secret :
       {&settings_.credentials.secret_access_key, &settings_.credentials.session_token}) {
    if (secret->size() < 4) continue;
    for (size_t p = text.find(*secret); p != std::string::npos; p = text.find(*secret, p)) {
      text.replace(p, secret->size(), "****");
    }
  }
  return text;
}

}  // namespace remote
}  // namespace dscache
