// Reading a table's values (list_table's helpers): numbers as people write them, UTF-8, the
// names of a multi-hot cell. Private to the ingest library.
#include <charconv>
#include <cmath>
#include <string>
#include <vector>

#include "list_internal.h"

namespace dscache::ingest_detail {
namespace {

// Values longer than this are cut in messages.
constexpr size_t kQuoteChars = 40;

}  // namespace

std::string quote(const std::string& s) {
  return "'" + (s.size() > kQuoteChars ? s.substr(0, kQuoteChars) + "..." : s) + "'";
}

bool parse_int(const std::string& s, int64_t* out) {
  const char* b = s.data();
  const char* e = b + s.size();
  if (b != e && *b == '+') ++b;
  if (b == e || *b == '+' || (*b == '-' && s[0] == '+')) return false;
  auto [p, ec] = std::from_chars(b, e, *out);
  return ec == std::errc() && p == e;
}

bool is_number_text(const std::string& s) {
  size_t i = 0, digits = 0;
  const size_t n = s.size();
  auto digit = [&](size_t k) { return k < n && s[k] >= '0' && s[k] <= '9'; };
  if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
  for (; digit(i); ++i) ++digits;
  if (i < n && s[i] == '.') {
    for (++i; digit(i); ++i) ++digits;
  }
  if (digits == 0) return false;
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
    if (!digit(i)) return false;
    while (digit(i)) ++i;
  }
  return i == n;
}

std::string parse_float(const std::string& s, float* out) {
  if (!is_number_text(s)) return quote(s) + " is not a number";
  const char* b = s.data() + (s[0] == '+' ? 1 : 0);
  double d = 0;
  auto [p, ec] = std::from_chars(b, s.data() + s.size(), d);
  *out = static_cast<float>(d);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(*out)) {
    return quote(s) + " is out of range for float32";
  }
  return "";
}

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = 1;
    uint32_t cp = c;
    if (c >= 0x80) {
      if ((c >> 5) == 0x6) {
        len = 2;
        cp = c & 0x1F;
      } else if ((c >> 4) == 0xE) {
        len = 3;
        cp = c & 0x0F;
      } else if ((c >> 3) == 0x1E) {
        len = 4;
        cp = c & 0x07;
      } else {
        return false;
      }
      if (i + len > s.size()) return false;
      for (size_t k = 1; k < len; ++k) {
        const auto d = static_cast<unsigned char>(s[i + k]);
        if ((d >> 6) != 0x2) return false;
        cp = (cp << 6) | (d & 0x3F);
      }
      const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
      if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    }
    i += len;
  }
  return true;
}

std::vector<std::string> multi_hot_names(const TableCell& c) {
  std::vector<std::string> names;
  if (c.is_array) {
    for (const std::string& item : c.items) {
      if (!item.empty()) names.push_back(item);
    }
    return names;
  }
  size_t start = 0;
  while (start <= c.text.size()) {
    size_t end = c.text.find(';', start);
    if (end == std::string::npos) end = c.text.size();
    const std::string name = trim(c.text.substr(start, end - start));
    if (!name.empty()) names.push_back(name);
    start = end + 1;
  }
  return names;
}

}  // namespace dscache::ingest_detail
