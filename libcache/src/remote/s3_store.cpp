// S3Store's single-request operations (s3_store.h).
#include "remote/s3_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdexcept>

#include "dscache/error.h"
#include "remote/s3_xml.h"
#include "util/io_util.h"

namespace dscache {
namespace remote {

namespace {

// "https://s3.eu-west-1.amazonaws.com" + "bkt" -> "https://bkt.s3.eu-west-1.amazonaws.com".
std::string virtual_host_base(const std::string& endpoint, const std::string& bucket) {
  size_t sep = endpoint.find("://");
  return endpoint.substr(0, sep + 3) + bucket + "." + endpoint.substr(sep + 3);
}

std::string read_whole(int fd, uint64_t size, const std::string& path) {
  std::string bytes(size, '\0');
  detail::pread_all(fd, bytes.data(), size, 0, path, ErrorKind::kIOError);
  return bytes;
}

}  // namespace

S3Store::S3Store(const Location& location, const S3Settings& s3, const Limits& limits)
    : ReadingStore(HttpSettings{s3.endpoint, limits.retries, limits.stall_timeout_s, s3.region,
                                s3.credentials, false}),
      bucket_(location.bucket),
      prefix_(location.prefix),
      bucket_base_(s3.virtual_host ? virtual_host_base(s3.endpoint, location.bucket)
                                   : s3.endpoint + "/" + location.bucket),
      list_base_(s3.virtual_host ? bucket_base_ + "/" : bucket_base_),
      limits_(limits) {}

std::string S3Store::full_key(const std::string& key) const {
  if (prefix_.empty()) return key;
  return key.empty() ? prefix_ : prefix_ + "/" + key;
}

std::string S3Store::url(const std::string& key) const {
  return "s3://" + bucket_ + "/" + full_key(key);
}

std::string S3Store::request_url(const std::string& key, const std::string& query) const {
  std::string u = bucket_base_ + "/" + uri_encode(full_key(key), true);
  if (!query.empty()) u += "?" + query;
  return u;
}

HttpResponse S3Store::checked(HttpRequest req, const std::string& what) {
  HttpResponse r = client_.send(req, what);
  if (r.status < 200 || r.status >= 300) client_.fail(what, r);
  return r;
}

void S3Store::put(const std::string& key, const std::string& bytes, const std::string& xxh64) {
  HttpRequest req;
  req.method = "PUT";
  req.url = request_url(key, "");
  req.body = &bytes;
  req.headers.push_back("Content-Type: application/octet-stream");
  if (!xxh64.empty()) req.headers.push_back("x-amz-meta-xxh64: " + xxh64);
  checked(std::move(req), url(key));
}

void S3Store::put_file(const std::string& key, const std::string& path, const std::string& xxh64) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_errno(path, "open");
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_errno(path, "fstat");
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < limits_.multipart_threshold) {
    // Below the threshold (64 MiB by default) the file is read whole: SigV4 hashes the payload
    // before sending it, and one buffer is simpler than reading the file twice.
    put(key, read_whole(fd, size, path), xxh64);
    return;
  }
  put_multipart(key, fd, size, path, xxh64);
}

std::vector<ObjectInfo> S3Store::list(const std::string& prefix) {
  std::vector<ObjectInfo> out;
  const std::string listed = prefix_.empty() ? prefix : prefix_ + "/" + prefix;
  const std::string strip = prefix_.empty() ? "" : prefix_ + "/";
  std::string token;
  do {
    std::vector<std::pair<std::string, std::string>> q = {{"list-type", "2"}, {"prefix", listed}};
    if (!token.empty()) q.push_back({"continuation-token", token});
    HttpRequest req;
    req.url = list_base_ + "?" + canonical_query(q);
    HttpResponse r = checked(std::move(req), "s3://" + bucket_ + "/" + listed);
    ListPage page;
    try {
      page = parse_list_page(r.body);
    } catch (const std::exception& e) {
      throw Error(ErrorKind::kRemote, "s3://" + bucket_ + "/" + listed,
                  std::string("unreadable ListObjectsV2 answer from ") +
                      client_.settings().endpoint + ": " + e.what());
    }
    for (ListedObject& o : page.objects) {
      if (o.key.compare(0, strip.size(), strip) != 0) continue;  // outside the location
      out.push_back(ObjectInfo{o.key.substr(strip.size()), o.size, o.etag, ""});
    }
    token = page.truncated ? page.next_token : "";
  } while (!token.empty());
  return out;
}

void S3Store::remove(const std::string& key) {
  HttpRequest req;
  req.method = "DELETE";
  req.url = request_url(key, "");
  HttpResponse r = client_.send(req, url(key));
  if (r.status == 404) return;  // already gone: what remove() is for
  if (r.status < 200 || r.status >= 300) client_.fail(url(key), r);
}

std::unique_ptr<ObjectStore> make_s3_store(const Location& location, const std::string& text,
                                           const RemoteOptions& options) {
  Limits limits = resolve_limits(options, text);
  S3Settings s3 = resolve_s3_settings(options, text, location.bucket);
  return std::make_unique<S3Store>(location, s3, limits);
}

}  // namespace remote
}  // namespace dscache
