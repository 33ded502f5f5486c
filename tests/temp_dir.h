// The one temporary directory of the C++ tests (unit, trainer and fuzz): standard library and
// POSIX only, so that the fuzz targets, which include no test framework, can use it too.
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace dscache::test {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
// Owns the directory; not copyable. A failed mkdtemp throws std::runtime_error, which fails the
// doctest case that made it (and aborts a fuzz target: a broken machine, not a finding).
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/dscache-test-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) {
      throw std::runtime_error("mkdtemp " + tmpl + ": " + std::strerror(errno));
    }
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;  // best effort: a test that failed half-way may leave odd modes behind
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace dscache::test
