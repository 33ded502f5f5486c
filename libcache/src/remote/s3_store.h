// S3Store: an s3://BUCKET/PREFIX location over SigV4-signed requests (stores.h). Its multipart
// upload lives in s3_multipart.cpp.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "remote/stores.h"

namespace dscache {
namespace remote {

class S3Store : public ReadingStore {
 public:
  S3Store(const Location& location, const S3Settings& s3, const Limits& limits);

  std::string url(const std::string& key) const override;
  bool writable() const override { return true; }
  void put(const std::string& key, const std::string& bytes, const std::string& xxh64) override;
  void put_file(const std::string& key, const std::string& path, const std::string& xxh64) override;
  std::vector<ObjectInfo> list(const std::string& prefix) override;
  void remove(const std::string& key) override;

 protected:
  std::string request_url(const std::string& key, const std::string& query) const override;

 private:
  std::string full_key(const std::string& key) const;
  // One request that must succeed (2xx), its response returned.
  HttpResponse checked(HttpRequest req, const std::string& what);
  void put_multipart(const std::string& key, int fd, uint64_t size, const std::string& path,
                     const std::string& xxh64);
  std::string create_upload(const std::string& key, const std::string& xxh64);
  std::string upload_part(const std::string& key, const std::string& upload_id, int number,
                          const std::string& bytes);
  void complete_upload(const std::string& key, const std::string& upload_id,
                       const std::vector<std::pair<int, std::string>>& parts);
  void abort_upload(const std::string& key, const std::string& upload_id) noexcept;

  std::string bucket_;
  std::string prefix_;       // "" or "a/b" (no slash at either end)
  std::string bucket_base_;  // "http://host:port/bucket" or "https://bucket.host"
  std::string list_base_;    // the bucket's own URL: path-style "/bucket", virtual "/"
  Limits limits_;
};

}  // namespace remote
}  // namespace dscache
