// Reading a JSON document in pieces for nlohmann's SAX parser: a streambuf over a file (1 MiB
// at a time) or over a text in memory that knows the offset of what it has handed out, so a SAX
// handler can say where a value starts and ends. Internal to dscache.
#pragma once

#include <cstdint>
#include <streambuf>
#include <string_view>
#include <vector>

#include "dscache/checksum.h"
#include "dscache/file.h"
#include "json/parse.h"

namespace dscache {

// Not thread-safe; the File, text and hash it is given must outlive it.
class JsonStreamBuf : public std::streambuf {
 public:
  // The first file.size() bytes of `file` (its size at open), each piece fed to `hash` when it
  // is not null as it is read.
  JsonStreamBuf(const File& file, Xxh64* hash);
  // `text`, not copied.
  explicit JsonStreamBuf(std::string_view text);

  // How many bytes were handed out: nlohmann reads one byte at a time and looks ahead only past
  // numbers, so after a '{' or '}' event this is the offset just past that bracket.
  uint64_t offset() const { return base_ + static_cast<uint64_t>(gptr() - eback()); }
  // Line and column of the 1-based byte `byte`, by reading the document again up to it (for
  // errors only: a file is read a second time).
  JsonPosition position(uint64_t byte) const;

 protected:
  int_type underflow() override;

 private:
  const File* file_ = nullptr;
  std::string_view text_;
  Xxh64* hash_ = nullptr;
  std::vector<char> buf_;
  uint64_t base_ = 0;  // the offset of eback()
};

}  // namespace dscache
