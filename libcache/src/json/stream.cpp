#include "json/stream.h"

#include <algorithm>
#include <string>

namespace dscache {
namespace {

constexpr uint64_t kPiece = uint64_t{1} << 20;

}  // namespace

JsonStreamBuf::JsonStreamBuf(const File& file, Xxh64* hash) : file_(&file), hash_(hash) {
  setg(nullptr, nullptr, nullptr);
}

JsonStreamBuf::JsonStreamBuf(std::string_view text) : text_(text) {
  char* p = const_cast<char*>(text.data());  // the get area is only read
  setg(p, p, p + text.size());
}

JsonStreamBuf::int_type JsonStreamBuf::underflow() {
  if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
  if (file_ == nullptr) return traits_type::eof();
  const uint64_t next = offset();
  const uint64_t n = std::min(kPiece, file_->size() - next);
  if (n == 0) return traits_type::eof();
  buf_.resize(static_cast<size_t>(kPiece));
  file_->read_at(next, n, buf_.data());
  if (hash_ != nullptr) hash_->update(buf_.data(), static_cast<size_t>(n));
  base_ = next;
  setg(buf_.data(), buf_.data(), buf_.data() + n);
  return traits_type::to_int_type(*gptr());
}

JsonPosition JsonStreamBuf::position(uint64_t byte) const {
  const uint64_t end = byte == 0 ? 0 : byte - 1;
  JsonPosition at;
  if (file_ == nullptr) {
    at.advance(text_.substr(0, static_cast<size_t>(std::min<uint64_t>(end, text_.size()))));
    return at;
  }
  std::string piece;
  for (uint64_t p = 0; p < std::min(end, file_->size()); p += kPiece) {
    piece.resize(static_cast<size_t>(std::min(kPiece, std::min(end, file_->size()) - p)));
    file_->read_at(p, piece.size(), &piece[0]);
    at.advance(piece);
  }
  return at;
}

}  // namespace dscache
