// .npy header parsing and formatting: a small explicit parser of the header's dict literal.
#include "dscache/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "dscache/atomic_file.h"
#include "dscache/error.h"
#include "dscache/file.h"

namespace dscache {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr size_t kMaxDims = 32;  // NumPy's own limit (NPY_MAXDIMS)

struct DescrInfo {
  const char* descr;
  uint64_t item_size;
};

// Little-endian (or byte-order-free) plain numeric types; never extend with a stored meaning
// change, only with new entries.
constexpr DescrInfo kDescrs[] = {
    {"|u1", 1}, {"<u1", 1}, {"|i1", 1}, {"<i1", 1}, {"|b1", 1}, {"<u2", 2}, {"<i2", 2},
    {"<u4", 4}, {"<i4", 4}, {"<u8", 8}, {"<i8", 8}, {"<f2", 2}, {"<f4", 4}, {"<f8", 8},
};

const DescrInfo* find_descr(const std::string& d) {
  for (const auto& info : kDescrs) {
    if (d == info.descr) return &info;
  }
  return nullptr;
}

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return true;
  *out = a * b;
  return false;
}

// Hostile headers may contain any byte; keep messages readable.
std::string printable(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 40)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (s.size() > 40) out += "...";
  return out;
}

// Recursive-descent parser over the dict text; every failure is Corruption naming the file.
class DictParser {
 public:
  DictParser(const char* text, size_t size, const std::string& path)
      : p_(text), end_(text + size), path_(path) {}

  void parse(NpyHeader* h) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    skip_ws();
    expect('{', "header dict must start with '{'");
    skip_ws();
    while (peek() != '}') {
      const std::string key = parse_string("dict key");
      skip_ws();
      expect(':', "expected ':' after key '" + key + "'");
      skip_ws();
      if (key == "descr") {
        if (have_descr) fail("duplicate key 'descr'");
        have_descr = true;
        if (peek() != '\'' && peek() != '"') {
          fail("descr must be a string (structured dtypes are not supported)");
        }
        h->descr = parse_string("descr");
      } else if (key == "fortran_order") {
        if (have_fortran) fail("duplicate key 'fortran_order'");
        have_fortran = true;
        h->fortran_order = parse_bool();
      } else if (key == "shape") {
        if (have_shape) fail("duplicate key 'shape'");
        have_shape = true;
        h->shape = parse_shape();
      } else {
        fail("unknown key '" + printable(key) + "'");
      }
      skip_ws();
      if (peek() == ',') {
        ++p_;
        skip_ws();
      } else if (peek() != '}') {
        fail("expected ',' or '}' in header dict");
      }
    }
    ++p_;  // '}'
    skip_ws();
    if (p_ != end_) fail("unexpected text after header dict");
    if (!have_descr) fail("missing key 'descr'");
    if (!have_fortran) fail("missing key 'fortran_order'");
    if (!have_shape) fail("missing key 'shape'");
  }

 private:
  [[noreturn]] void fail(const std::string& reason) const {
    throw Error(ErrorKind::kCorruption, path_, "bad npy header: " + reason);
  }

  // The next character; running out of text inside the dict is an error.
  char peek() const {
    if (p_ == end_) fail("header dict ends early");
    return *p_;
  }

  void skip_ws() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }

  void expect(char c, const std::string& reason) {
    if (p_ == end_ || *p_ != c) fail(reason);
    ++p_;
  }

  std::string parse_string(const char* what) {
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail(std::string("expected a quoted string for ") + what);
    ++p_;
    std::string s;
    for (;;) {
      if (p_ == end_) fail(std::string("unterminated string in ") + what);
      const char c = *p_++;
      if (c == quote) break;
      if (c == '\\') fail(std::string("escape sequences are not supported in ") + what);
      if (c == '\n' || c == '\0') fail(std::string("unterminated string in ") + what);
      s += c;
    }
    return s;
  }

  bool parse_bool() {
    static constexpr char kTrue[] = "True";
    static constexpr char kFalse[] = "False";
    const size_t left = static_cast<size_t>(end_ - p_);
    if (left >= 4 && std::memcmp(p_, kTrue, 4) == 0 && !ident_char_at(4)) {
      p_ += 4;
      return true;
    }
    if (left >= 5 && std::memcmp(p_, kFalse, 5) == 0 && !ident_char_at(5)) {
      p_ += 5;
      return false;
    }
    fail("fortran_order must be True or False");
  }

  bool ident_char_at(size_t off) const {
    if (static_cast<size_t>(end_ - p_) <= off) return false;
    const char c = p_[off];
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }

  uint64_t parse_dim(size_t index) {
    if (peek() == '-') fail("shape[" + std::to_string(index) + "] is negative");
    if (*p_ < '0' || *p_ > '9') fail("shape must be a tuple of non-negative integers");
    uint64_t v = 0;
    while (p_ != end_ && *p_ >= '0' && *p_ <= '9') {
      const uint64_t digit = static_cast<uint64_t>(*p_ - '0');
      if (v > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
        fail("shape[" + std::to_string(index) + "] does not fit in 64 bits");
      }
      v = v * 10 + digit;
      ++p_;
    }
    if (p_ != end_ && *p_ == 'L') ++p_;  // Python 2 era files wrote long literals as "3L"
    return v;
  }

  std::vector<uint64_t> parse_shape() {
    expect('(', "shape must be a tuple");
    std::vector<uint64_t> dims;
    bool trailing_comma = false;
    skip_ws();
    while (peek() != ')') {
      if (dims.size() == kMaxDims) {
        fail("shape has more than " + std::to_string(kMaxDims) + " dimensions");
      }
      dims.push_back(parse_dim(dims.size()));
      skip_ws();
      trailing_comma = false;
      if (peek() == ',') {
        ++p_;
        trailing_comma = true;
        skip_ws();
      } else if (peek() != ')') {
        fail("expected ',' or ')' in shape");
      }
    }
    ++p_;  // ')'
    // "(5)" is the integer 5 in Python, not a tuple; NumPy rejects it too.
    if (dims.size() == 1 && !trailing_comma) fail("shape must be a tuple, e.g. (5,)");
    return dims;
  }

  const char* p_;
  const char* end_;
  const std::string& path_;
};

[[noreturn]] void fail_header(const std::string& path, const std::string& reason) {
  throw Error(ErrorKind::kCorruption, path, "bad npy header: " + reason);
}

uint32_t read_le(const unsigned char* p, size_t n) {
  uint32_t v = 0;
  for (size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ',';
  s += ')';
  return s;
}

}  // namespace

uint64_t NpyHeader::item_size() const {
  const DescrInfo* info = find_descr(descr);
  if (info == nullptr)
    throw Error(ErrorKind::kInvalidArgument, "", "unsupported descr '" + descr + "'");
  return info->item_size;
}

uint64_t NpyHeader::element_count() const {
  uint64_t n = 1;
  for (uint64_t d : shape) {
    if (mul_overflows(n, d, &n)) {
      throw Error(ErrorKind::kCorruption, "", "npy shape " + shape_text(shape) + " overflows");
    }
  }
  return n;
}

uint64_t NpyHeader::data_bytes() const {
  uint64_t bytes = 0;
  if (mul_overflows(element_count(), item_size(), &bytes)) {
    throw Error(ErrorKind::kCorruption, "", "npy shape " + shape_text(shape) + " overflows");
  }
  return bytes;
}

NpyHeader parse_npy_header(const void* bytes, size_t size, const std::string& path) {
  const auto* b = static_cast<const unsigned char*>(bytes);
  if (size == 0) fail_header(path, "empty file");
  if (std::memcmp(b, kMagic, std::min(size, kMagicLen)) != 0) {
    fail_header(path, "not an npy file (bad magic)");
  }
  if (size < kMagicLen + 2) fail_header(path, "truncated (" + std::to_string(size) + " bytes)");
  NpyHeader h;
  h.major = b[6];
  h.minor = b[7];
  if (h.major < 1 || h.major > 3 || h.minor != 0) {
    fail_header(path, "unsupported format version " + std::to_string(h.major) + "." +
                          std::to_string(h.minor));
  }
  const size_t len_bytes = h.major == 1 ? 2 : 4;
  const size_t prefix = kMagicLen + 2 + len_bytes;
  if (size < prefix) fail_header(path, "truncated (" + std::to_string(size) + " bytes)");
  const uint64_t header_len = read_le(b + kMagicLen + 2, len_bytes);
  h.data_offset = prefix + header_len;
  if (h.data_offset > size) {
    fail_header(path, "header length " + std::to_string(header_len) + " runs past the " +
                          std::to_string(size) + " bytes available");
  }
  DictParser(reinterpret_cast<const char*>(b + prefix), static_cast<size_t>(header_len), path)
      .parse(&h);

  if (!h.descr.empty() && h.descr[0] == '>') {
    fail_header(path, "big-endian descr '" + printable(h.descr) + "' is not supported");
  }
  if (h.descr.find('O') != std::string::npos) fail_header(path, "object arrays are not supported");
  const DescrInfo* info = find_descr(h.descr);
  if (info == nullptr) fail_header(path, "unsupported descr '" + printable(h.descr) + "'");
  uint64_t n = info->item_size;
  for (uint64_t d : h.shape) {
    if (mul_overflows(n, d, &n))
      fail_header(path, "shape " + shape_text(h.shape) + " overflows 64 bits");
  }
  return h;
}

NpyHeader read_npy_header(const std::string& path) { return read_npy_header(File::open(path)); }

NpyHeader read_npy_header(const File& file) {
  const std::string& path = file.path();
  const uint64_t file_size = file.size();
  auto read_at = [&](std::string* buf, size_t want) {
    const size_t have = static_cast<size_t>(std::min<uint64_t>(want, file_size));
    buf->resize(have);
    if (have > 0) file.read_at(0, have, &(*buf)[0]);
  };

  // The prefix is 12 bytes at most; then read exactly the header it announces, bounded by the
  // file's size so a hostile length cannot make us allocate gigabytes.
  std::string buf;
  read_at(&buf, 12);
  size_t want = buf.size();
  if (buf.size() >= 10 && std::memcmp(buf.data(), kMagic, kMagicLen) == 0) {
    const auto* b = reinterpret_cast<const unsigned char*>(buf.data());
    const size_t len_bytes = b[6] == 1 ? 2 : 4;
    if (b[6] >= 1 && b[6] <= 3 && buf.size() >= kMagicLen + 2 + len_bytes) {
      const uint64_t total = kMagicLen + 2 + len_bytes + read_le(b + kMagicLen + 2, len_bytes);
      if (total > file_size) {
        throw Error(ErrorKind::kCorruption, path,
                    "bad npy header: file holds " + std::to_string(file_size) +
                        " bytes, header needs " + std::to_string(total));
      }
      want = static_cast<size_t>(total);
    }
  }
  if (want > buf.size()) read_at(&buf, want);
  return parse_npy_header(buf.data(), buf.size(), path);
}

void check_npy_size(const NpyHeader& h, uint64_t file_bytes, const std::string& path) {
  uint64_t data = 0;
  try {
    data = h.data_bytes();
  } catch (const Error& e) {
    throw Error(ErrorKind::kCorruption, path, e.reason());
  }
  if (h.data_offset > file_bytes || data != file_bytes - h.data_offset) {
    throw Error(ErrorKind::kCorruption, path,
                "file holds " + std::to_string(file_bytes) + " bytes, header says " +
                    (data > UINT64_MAX - h.data_offset ? std::string("more than 2^64")
                                                       : std::to_string(h.data_offset + data)));
  }
}

std::vector<uint8_t> read_npy_data(const File& file, const NpyHeader& h) {
  check_npy_size(h, file.size(), file.path());  // before allocating what the header claims
  std::vector<uint8_t> out(static_cast<size_t>(file.size() - h.data_offset));
  if (!out.empty()) file.read_at(h.data_offset, out.size(), out.data());
  return out;
}

std::vector<uint8_t> read_npy_data(const std::string& path, const NpyHeader& h) {
  return read_npy_data(File::open(path), h);
}

std::string format_npy_header(const std::string& descr, const std::vector<uint64_t>& shape,
                              size_t min_total) {
  if (find_descr(descr) == nullptr) {
    throw Error(ErrorKind::kInvalidArgument, "", "unsupported npy descr '" + descr + "'");
  }
  if (shape.size() > kMaxDims) {
    throw Error(ErrorKind::kInvalidArgument, "", "npy arrays have at most 32 dimensions");
  }
  // The exact text NumPy itself writes, so our files are indistinguishable from np.save's.
  const std::string dict =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape_text(shape) + ", }";
  auto round64 = [](size_t n) { return (n + 63) / 64 * 64; };
  size_t prefix = 10;
  size_t total = std::max(round64(prefix + dict.size() + 1), round64(min_total));
  if (total - prefix > 0xFFFF) {
    prefix = 12;
    total = std::max(round64(prefix + dict.size() + 1), round64(min_total));
  }
  const uint64_t header_len = total - prefix;
  std::string out(kMagic, kMagicLen);
  out += static_cast<char>(prefix == 10 ? 1 : 2);
  out += '\0';
  for (size_t i = 0; i < prefix - 8; ++i) out += static_cast<char>((header_len >> (8 * i)) & 0xFF);
  out += dict;
  out.append(total - out.size() - 1, ' ');
  out += '\n';
  return out;
}

void write_npy_file(const std::string& path, const std::string& descr,
                    const std::vector<uint64_t>& shape, const void* data, size_t bytes) {
  const std::string header = format_npy_header(descr, shape);
  NpyHeader h;
  h.descr = descr;
  h.shape = shape;
  uint64_t expected = 0;
  try {
    expected = h.data_bytes();
  } catch (const Error&) {
    throw Error(ErrorKind::kInvalidArgument, path, "npy shape overflows 64 bits");
  }
  if (expected != bytes) {
    throw Error(ErrorKind::kInvalidArgument, path,
                "shape " + shape_text(shape) + " needs " + std::to_string(expected) +
                    " bytes, got " + std::to_string(bytes));
  }
  AtomicFile f(path);
  f.write(header.data(), header.size());
  if (bytes > 0) f.write(data, bytes);
  f.commit();
}

}  // namespace dscache
