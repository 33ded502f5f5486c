// S3Store's multipart upload (s3_store.h): parts read with pread and sent by up to
// requests_in_flight threads, then completed; any failure aborts the upload so no parts are
// left billed and invisible in the bucket.
#include <unistd.h>

#include <algorithm>

#include "dscache/error.h"
#include "remote/parallel.h"
#include "remote/s3_store.h"
#include "remote/s3_xml.h"
#include "util/io_util.h"

namespace dscache {
namespace remote {

namespace {

constexpr uint64_t kMaxParts = 10000;  // S3's limit on a multipart upload

std::string read_part(int fd, uint64_t offset, uint64_t length, const std::string& path) {
  std::string bytes(length, '\0');
  detail::pread_all(fd, bytes.data(), length, offset, path, ErrorKind::kIOError);
  return bytes;
}

}  // namespace

std::string S3Store::create_upload(const std::string& key, const std::string& xxh64) {
  HttpRequest req;
  req.method = "POST";
  req.url = request_url(key, canonical_query({{"uploads", ""}}));
  req.headers.push_back("Content-Type: application/octet-stream");  // the object's type
  if (!xxh64.empty()) req.headers.push_back("x-amz-meta-xxh64: " + xxh64);
  HttpResponse r = checked(std::move(req), url(key));
  std::string id = xml_first(r.body, "UploadId").value_or("");
  if (id.empty()) {
    throw Error(ErrorKind::kRemote, url(key),
                "CreateMultipartUpload answer without an UploadId from " + endpoint());
  }
  return id;
}

std::string S3Store::upload_part(const std::string& key, const std::string& upload_id, int number,
                                 const std::string& bytes) {
  HttpRequest req;
  req.method = "PUT";
  req.url = request_url(
      key, canonical_query({{"partNumber", std::to_string(number)}, {"uploadId", upload_id}}));
  req.body = &bytes;
  HttpResponse r = checked(std::move(req), url(key) + " (part " + std::to_string(number) + ")");
  std::string etag = r.header("etag");
  if (etag.empty()) {
    throw Error(ErrorKind::kRemote, url(key),
                "part " + std::to_string(number) + " stored without an ETag by " + endpoint());
  }
  return etag;
}

void S3Store::complete_upload(const std::string& key, const std::string& upload_id,
                              const std::vector<std::pair<int, std::string>>& parts) {
  const std::string body = complete_multipart_body(parts);
  HttpRequest req;
  req.method = "POST";
  req.url = request_url(key, canonical_query({{"uploadId", upload_id}}));
  req.body = &body;
  req.headers.push_back("Content-Type: application/xml");
  HttpResponse r = checked(std::move(req), url(key));
  // S3 may answer 200 and still fail: the error is then in the body.
  S3ErrorBody e = parse_error_body(r.body);
  if (!e.code.empty()) {
    throw Error(
        ErrorKind::kRemote, url(key),
        "CompleteMultipartUpload failed: " + e.code + " from " + endpoint() + ": " + e.message);
  }
}

void S3Store::abort_upload(const std::string& key, const std::string& upload_id) noexcept {
  try {
    HttpRequest req;
    req.method = "DELETE";
    req.url = request_url(key, canonical_query({{"uploadId", upload_id}}));
    client_.send(req, url(key));
  } catch (...) {
    // Best effort: the upload's own failure is what the caller must see.
  }
}

void S3Store::put_multipart(const std::string& key, int fd, uint64_t size, const std::string& path,
                            const std::string& xxh64) {
  uint64_t part = std::max(limits_.part_bytes, (size + kMaxParts - 1) / kMaxParts);
  const uint64_t count = (size + part - 1) / part;
  const std::string upload_id = create_upload(key, xxh64);
  std::vector<std::pair<int, std::string>> parts(count);
  try {
    parallel_for(static_cast<size_t>(count), limits_.requests_in_flight, [&](size_t i) {
      const uint64_t offset = i * part;
      std::string bytes = read_part(fd, offset, std::min(part, size - offset), path);
      const int number = static_cast<int>(i + 1);
      parts[i] = {number, upload_part(key, upload_id, number, bytes)};
    });
    complete_upload(key, upload_id, parts);
  } catch (...) {
    abort_upload(key, upload_id);
    throw;
  }
}

}  // namespace remote
}  // namespace dscache
