// The byte-count grammar shared by `dscache` and `dscache-train` (dscache/byte_count.h).
#include "dscache/byte_count.h"

#include <string>

#include "dscache/error.h"

namespace dscache {
namespace {

struct Unit {
  const char* name;
  int shift;  // the unit is 2^shift bytes
};

// Every spelling accepted (the error message lists them). "k" because it was always taken.
constexpr Unit kUnits[] = {
    {"", 0},     {"B", 0},  {"K", 10},   {"k", 10}, {"KiB", 10}, {"M", 20},
    {"MiB", 20}, {"G", 30}, {"GiB", 30}, {"T", 40}, {"TiB", 40},
};

// At most 19 digits: 9999999999999999999 < 2^64, so the decimal value itself never overflows.
constexpr size_t kMaxDigits = 19;

std::string unit_names() {
  std::string out;
  for (const Unit& u : kUnits) {
    if (*u.name == '\0') continue;
    if (!out.empty()) out += ", ";
    out += u.name;
  }
  return out;
}

}  // namespace

uint64_t parse_byte_count(std::string_view text, std::string_view field) {
  auto fail = [&] {
    return Error(ErrorKind::kInvalidArgument, "",
                 std::string(field) + " '" + std::string(text) +
                     "': expected a positive byte count such as 1G, 512M, 65536 (units " +
                     unit_names() + ": powers of 1024)");
  };
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  int shift = -1;
  for (const Unit& u : kUnits) {
    if (text.substr(digits) == u.name) shift = u.shift;
  }
  if (digits == 0 || digits > kMaxDigits || shift < 0) throw fail();
  uint64_t v = 0;
  for (size_t i = 0; i < digits; ++i) v = v * 10 + static_cast<uint64_t>(text[i] - '0');
  if (v == 0 || v > (UINT64_MAX >> shift)) throw fail();
  return v << shift;
}

}  // namespace dscache
