// The reads every store shares (stores.h): HEAD, GET, ranged GET, GET streamed into a file.
#include <unistd.h>

#include <cerrno>

#include "dscache/error.h"
#include "remote/stores.h"

namespace dscache {
namespace remote {

std::optional<ObjectInfo> ReadingStore::head(const std::string& key) {
  HttpRequest req;
  req.method = "HEAD";
  req.url = request_url(key, "");
  HttpResponse r = client_.send(req, url(key));
  if (r.status == 404) return std::nullopt;
  if (r.status < 200 || r.status >= 300) client_.fail(url(key), r);
  return info_from_headers(key, r);
}

std::string ReadingStore::get(const std::string& key) {
  std::string bytes;
  get(key, &bytes);
  return bytes;
}

ObjectInfo ReadingStore::get(const std::string& key, std::string* bytes) {
  HttpRequest req;
  req.url = request_url(key, "");
  HttpResponse r = client_.send(req, url(key));
  if (r.status < 200 || r.status >= 300) client_.fail(url(key), r);
  ObjectInfo info = info_from_headers(key, r);
  info.size = r.body.size();
  *bytes = std::move(r.body);
  return info;
}

std::string ReadingStore::get_range(const std::string& key, uint64_t offset, uint64_t length) {
  if (length == 0) return "";
  HttpRequest req;
  req.url = request_url(key, "");
  req.headers.push_back("Range: bytes=" + std::to_string(offset) + "-" +
                        std::to_string(offset + length - 1));
  HttpResponse r = client_.send(req, url(key));
  check_range_response(client_, url(key), r, offset, length);
  return std::move(r.body);
}

namespace {

void write_all(int fd, const char* data, size_t n, const std::string& fd_path) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw_errno(fd_path, "write");
    data += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

ObjectInfo ReadingStore::get_to_fd(const std::string& key, int fd, const std::string& fd_path) {
  const off_t start = ::lseek(fd, 0, SEEK_CUR);  // -1 for a pipe: then no retry mid-body
  uint64_t received = 0;
  HttpRequest req;
  req.url = request_url(key, "");
  req.sink = [&](const char* data, size_t n) {
    write_all(fd, data, n, fd_path);
    received += n;
  };
  if (start >= 0) {
    req.restart = [&] {  // a retry starts the body over: drop what the failed attempt wrote
      if (::lseek(fd, start, SEEK_SET) < 0) throw_errno(fd_path, "lseek");
      if (::ftruncate(fd, start) != 0) throw_errno(fd_path, "ftruncate");
      received = 0;
    };
  }
  HttpResponse r = client_.send(req, url(key));
  if (r.status < 200 || r.status >= 300) client_.fail(url(key), r);
  ObjectInfo info = info_from_headers(key, r);
  if (!r.header("content-length").empty() && info.size != received) {
    throw Error(ErrorKind::kRemote, url(key),
                "received " + std::to_string(received) + " bytes, Content-Length said " +
                    std::to_string(info.size) + " (" + client_.settings().endpoint + ")");
  }
  info.size = received;
  return info;
}

}  // namespace remote
}  // namespace dscache
