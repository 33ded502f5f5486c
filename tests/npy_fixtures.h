// Fixtures of the .npy tests (test_npy*.cpp): hand-built headers and the descrs to try.
#pragma once

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "dscache/npy.h"
#include "test_util.h"

namespace dscache::test {

// The library's names the test files use unqualified: they take them, with the fixtures,
// by `using namespace dscache::test`.
using dscache::Error;
using dscache::ErrorKind;
using dscache::NpyHeader;

// Builds magic + version + little-endian length + `dict` (+ '\n' padding when asked).
inline std::string make_header(int major, const std::string& dict, bool pad = true) {
  std::string text = dict;
  const size_t prefix = major == 1 ? 10 : 12;
  if (pad) {
    text += ' ';
    while ((prefix + text.size() + 1) % 64 != 0) text += ' ';
    text += '\n';
  }
  std::string h("\x93NUMPY", 6);
  h += static_cast<char>(major);
  h += '\0';
  for (size_t i = 0; i < prefix - 8; ++i) h += static_cast<char>((text.size() >> (8 * i)) & 0xFF);
  return h + text;
}

inline NpyHeader parse(const std::string& bytes) {
  return dscache::parse_npy_header(bytes.data(), bytes.size(), "x.npy");
}

inline std::string shape_str(const std::vector<uint64_t>& s) {
  std::string out;
  for (uint64_t d : s) out += std::to_string(d) + "x";
  return out;
}

const char* const kDescrs[] = {"|u1", "<u1", "|i1", "<i1", "|b1", "<u2", "<i2",
                               "<u4", "<i4", "<u8", "<i8", "<f2", "<f4", "<f8"};

}  // namespace dscache::test
