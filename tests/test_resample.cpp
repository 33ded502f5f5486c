// resample()'s SIMD paths against resample_reference, byte for byte: a table of shapes and a
// seeded sweep over channels, flips, bilinear, area, scaled-area and irregular taps, with the
// source ending at a guard page so that a read past the last tapped byte faults.
#include <doctest/doctest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "codec/resample.h"

namespace {

using dscache::detail::AxisTaps;
using dscache::detail::kResampleOne;
using dscache::detail::make_scaled_area_taps;
using dscache::detail::make_taps;
using dscache::detail::resample_paths;
using dscache::detail::resample_reference;
using dscache::detail::resample_with;
using dscache::detail::ResamplePath;
using dscache::detail::taps_extent;

std::string path_name(ResamplePath p) {
  switch (p) {
    case ResamplePath::kScalar:
      return "scalar";
    case ResamplePath::kSse41Rows:
      return "sse4.1-rows";
    case ResamplePath::kSse41Columns:
      return "sse4.1-columns";
    case ResamplePath::kSse41:
      return "sse4.1";
    case ResamplePath::kAvx2Rows:
      return "avx2-rows";
    case ResamplePath::kAvx2Columns:
      return "avx2-columns";
    case ResamplePath::kAvx2:
      return "avx2";
  }
  return "?";
}

// `bytes` readable bytes that end where a PROT_NONE page begins.
class GuardedBuffer {
 public:
  explicit GuardedBuffer(size_t bytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    data_len_ = (bytes + page - 1) / page * page;
    map_len_ = data_len_ + page;
    void* m = mmap(nullptr, map_len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    INFO("mapping ", map_len_, " bytes: ", std::string(std::strerror(errno)));
    REQUIRE(m != MAP_FAILED);
    base_ = static_cast<uint8_t*>(m);
    REQUIRE(mprotect(base_ + data_len_, page, PROT_NONE) == 0);
    data_ = base_ + data_len_ - bytes;
  }
  ~GuardedBuffer() { munmap(base_, map_len_); }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;
  uint8_t* data() const { return data_; }

 private:
  uint8_t* base_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t data_len_ = 0, map_len_ = 0;
};

// Taps no rule makes: 1..5 per output at random (unsorted, gapped, repeated) indices below
// `in`, weights summing to kResampleOne but in 1 of 8 calls for one output, whose weights sum
// to less (the SIMD paths leave such taps to the reference).
AxisTaps irregular_taps(uint32_t in, uint32_t out, std::mt19937& rng) {
  AxisTaps t;
  const uint32_t short_out = std::uniform_int_distribution<uint32_t>(0, 7)(rng) == 0
                                 ? std::uniform_int_distribution<uint32_t>(0, out - 1)(rng)
                                 : out;
  for (uint32_t o = 0; o < out; ++o) {
    const bool short_sum = o == short_out;
    const uint32_t n = std::uniform_int_distribution<uint32_t>(1, 5)(rng);
    const uint32_t centre = std::uniform_int_distribution<uint32_t>(0, in - 1)(rng);
    t.first.push_back(static_cast<uint32_t>(t.index.size()));
    t.count.push_back(n);
    int32_t left = short_sum ? kResampleOne - 1 : kResampleOne;
    for (uint32_t j = 0; j < n; ++j) {
      const uint32_t spread = std::uniform_int_distribution<uint32_t>(0, 6)(rng);
      const uint32_t i = std::min(in - 1, centre + spread);
      const int32_t w = j + 1 == n ? left : std::uniform_int_distribution<int32_t>(0, left)(rng);
      t.index.push_back(i);
      t.weight.push_back(w);
      left -= w;
    }
  }
  return t;
}

struct Shape {
  size_t channels;
  uint32_t src_h, src_w;
  uint32_t out_h, out_w;
  size_t extra_stride;  // bytes past width * channels per row
  bool flip;
};

// Resamples random bytes with every path; each must give resample_reference's bytes.
void check_paths(const Shape& s, const AxisTaps& ty, const AxisTaps& tx, uint32_t seed) {
  REQUIRE(taps_extent(ty) <= s.src_h);
  REQUIRE(taps_extent(tx) <= s.src_w);
  const size_t stride = size_t{s.src_w} * s.channels + s.extra_stride;
  // The last row ends at its last pixel, on the guard page.
  const size_t bytes = (size_t{s.src_h} - 1) * stride + size_t{s.src_w} * s.channels;
  GuardedBuffer src(bytes);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < bytes; ++i) src.data()[i] = static_cast<uint8_t>(rng());
  const size_t out_len = size_t{s.out_h} * s.out_w * s.channels;
  std::vector<uint8_t> want(out_len), got;
  std::vector<int32_t> row;
  resample_reference(src.data(), stride, s.channels, ty, tx, s.out_h, s.out_w, s.flip, want.data(),
                     &row);
  for (const ResamplePath path : resample_paths()) {
    got.assign(out_len, 0xA5);
    resample_with(path, src.data(), stride, s.channels, ty, tx, s.out_h, s.out_w, s.flip,
                  got.data(), &row);
    INFO(path_name(path), ": C ", s.channels, " ", s.src_h, "x", s.src_w, " -> ", s.out_h, "x",
         s.out_w, " flip ", s.flip, " stride +", s.extra_stride, " seed ", seed);
    REQUIRE(got == want);
  }
}

TEST_CASE("resample_paths: scalar first, SSE4.1 and AVX2 wherever the CPU has them") {
  const std::vector<ResamplePath> paths = resample_paths();
  REQUIRE_FALSE(paths.empty());
  CHECK(paths.front() == ResamplePath::kScalar);
  auto has = [&](ResamplePath p) {
    return std::find(paths.begin(), paths.end(), p) != paths.end();
  };
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  const bool sse41 = __builtin_cpu_supports("sse4.1"), avx2 = __builtin_cpu_supports("avx2");
  CHECK(has(ResamplePath::kSse41) == sse41);
  CHECK(has(ResamplePath::kSse41Rows) == sse41);
  CHECK(has(ResamplePath::kSse41Columns) == sse41);
  CHECK(has(ResamplePath::kAvx2Rows) == avx2);
  CHECK(has(ResamplePath::kAvx2Columns) == avx2);
  CHECK((paths.back() == ResamplePath::kAvx2) == avx2);
  if (!avx2) CHECK((paths.back() == ResamplePath::kSse41) == sse41);
#else
  CHECK(paths.size() == 1);
#endif
  MESSAGE("paths: ", paths.size(), ", fastest ", path_name(paths.back()));
}

TEST_CASE("resample: every path gives the reference's bytes on a table of shapes") {
  // channels, src h x w, out h x w, extra stride, flip
  const Shape cases[] = {
      {3, 365, 365, 224, 224, 0, false},  // RandomResizedCrop's bilinear downscale
      {3, 365, 365, 224, 224, 0, true},   // ... flipped
      {3, 365, 365, 64, 64, 0, false},    // area
      {3, 100, 80, 224, 224, 5, true},    // upscale, odd stride
      {1, 1, 1, 1, 1, 0, false},          // 1x1 to 1x1
      {3, 1, 1, 7, 9, 0, false},          // one pixel stretched
      {4, 50, 300, 1, 1, 0, false},       // everything into one pixel
      {1, 37, 300, 13, 300, 3, true},     // grey, the same width
      {2, 40, 41, 17, 19, 1, false},      // two channels
      {4, 64, 64, 31, 33, 0, true},       // RGBA
      {5, 30, 31, 12, 14, 2, true},       // five channels: the scalar path
      {3, 9, 2, 5, 1, 0, false},          // a single output column
      {3, 600, 17, 300, 300, 7, false},   // tall and thin, upscaled in x
  };
  uint32_t seed = 1;
  for (const Shape& s : cases) {
    check_paths(s, make_taps(s.src_h, s.out_h), make_taps(s.src_w, s.out_w), seed++);
  }
}

TEST_CASE("resample: a seeded sweep of taps, channels, flips and strides matches the reference") {
  std::mt19937 rng(20261204);
  auto pick = [&](uint32_t lo, uint32_t hi) {
    return std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
  };
  // One axis: `out` outputs from a source of *in pixels by rule `kind`.
  auto axis = [&](uint32_t kind, uint32_t out, uint32_t* in) -> AxisTaps {
    switch (kind) {
      case 0:  // make_taps, either rule
        *in = pick(1, 3 * out + 20);
        return make_taps(*in, out);
      case 1: {  // make_scaled_area_taps: a footprint of >= 2*out decoded at scale m/8
        const uint32_t m = pick(1, 8), len = pick(2 * out, 6 * out + 16);
        const uint32_t start = pick(0, len / 2);
        const uint32_t lo = start * m / 8, hi = ((start + len) * m + 7) / 8;
        const uint32_t region_start = lo - pick(0, lo), region_end = hi + pick(0, 3);
        AxisTaps t =
            make_scaled_area_taps(start, len, out, m, region_start, region_end - region_start);
        *in = std::max(region_end - region_start, taps_extent(t));
        return t;
      }
      default:  // irregular
        *in = pick(1, 2 * out + 10);
        return irregular_taps(*in, out, rng);
    }
  };
  constexpr int kCases = 3000;
  for (int i = 0; i < kCases; ++i) {
    Shape s{};
    s.channels = pick(1, 5);
    s.out_w = pick(0, 3) == 0 ? pick(1, 8) : pick(1, 300);
    s.out_h = pick(0, 3) == 0 ? 1 : pick(1, 24);
    s.flip = pick(0, 1) == 1;
    s.extra_stride = pick(0, 1) == 1 ? pick(1, 40) : 0;
    const AxisTaps ty = axis(pick(0, 2), s.out_h, &s.src_h);
    const AxisTaps tx = axis(pick(0, 2), s.out_w, &s.src_w);
    check_paths(s, ty, tx, static_cast<uint32_t>(i));
  }
  CHECK(kCases > 0);
}

// Not a check (skipped unless asked): resample alone on RandomResizedCrop's shapes, every path
// timed in interleaved rounds, the median per image and the ratio to the reference.
//   build/tests/test_resample --test-case='*speed*' --no-skip
TEST_CASE("resample speed: every path against the reference" * doctest::skip()) {
  struct Case {
    const char* name;
    size_t channels;
    uint32_t src, out;
  };
  const Case cases[] = {{"bilinear 365->224 x3", 3, 365, 224},
                        {"area 365->64 x3", 3, 365, 64},
                        {"bilinear 365->224 x1", 1, 365, 224},
                        {"bilinear 365->224 x4", 4, 365, 224}};
  const std::vector<ResamplePath> paths = resample_paths();
  for (const Case& c : cases) {
    std::mt19937 rng(7);
    std::vector<uint8_t> src(size_t{c.src} * c.src * c.channels);
    for (uint8_t& b : src) b = static_cast<uint8_t>(rng());
    const AxisTaps t = make_taps(c.src, c.out);
    std::vector<uint8_t> want(size_t{c.out} * c.out * c.channels), got(want.size());
    std::vector<int32_t> row;
    std::vector<std::vector<double>> us(paths.size());
    for (int round = 0; round < 15; ++round) {
      for (size_t p = 0; p < paths.size(); ++p) {
        constexpr int kReps = 20;
        const auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < kReps; ++r) {
          resample_with(paths[p], src.data(), size_t{c.src} * c.channels, c.channels, t, t, c.out,
                        c.out, r % 2 == 1, p == 0 ? want.data() : got.data(), &row);
        }
        const std::chrono::duration<double, std::micro> d = std::chrono::steady_clock::now() - t0;
        us[p].push_back(d.count() / kReps);
      }
      if (paths.size() > 1) REQUIRE(got == want);
    }
    std::string line = c.name;
    for (size_t p = 0; p < paths.size(); ++p) {
      std::sort(us[p].begin(), us[p].end());
      const double median = us[p][us[p].size() / 2];
      const double ref = us[0][us[0].size() / 2];
      line += "  " + path_name(paths[p]) + " " + std::to_string(median) + " us (" +
              std::to_string(ref / median) + "x)";
    }
    MESSAGE(line);
  }
}

}  // namespace
