// resample()'s SSE4.1 kernels (see resample_simd.h), for x86-64 CPUs without AVX2: the AVX2
// kernels' steps one 128-bit lane at a time, on the same plans. Compiled for baseline x86-64:
// only these functions carry target("sse4.1"), and resample_sse41_kernels() hands them out only
// where the CPU has SSE4.1. Other architectures get null.
#include "codec/resample_simd.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include <cstring>
#define DSCACHE_RESAMPLE_SSE41 1
#define DSCACHE_SSE41 __attribute__((target("sse4.1")))
#endif

namespace dscache {
namespace detail {

#ifdef DSCACHE_RESAMPLE_SSE41
namespace {

constexpr int8_t kZ = -128;  // pshufb: a zero byte

DSCACHE_SSE41 inline __m128i load(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}

DSCACHE_SSE41 inline void store(void* p, __m128i v) {
  _mm_storeu_si128(static_cast<__m128i*>(p), v);
}

// Rows first, lanes: the AVX2 step's two 128-bit lanes one after the other.
DSCACHE_SSE41 void horizontal_lanes(const HorizontalPlan& plan, const uint8_t* src, int32_t* dst) {
  const uint32_t* base = plan.lane_base.data();
  const uint8_t* control = plan.lane_control.data();
  const int16_t* w = plan.weight.data();
  for (uint32_t i = 0; i < plan.chunks; ++i, dst += 8) {
    __m128i acc0 = _mm_setzero_si128(), acc1 = _mm_setzero_si128();
    for (uint32_t p = 0; p < plan.pairs; ++p, base += 2, control += 32, w += 16) {
      const __m128i v0 = _mm_shuffle_epi8(load(src + base[0]), load(control));
      const __m128i v1 = _mm_shuffle_epi8(load(src + base[1]), load(control + 16));
      acc0 = _mm_add_epi32(acc0, _mm_madd_epi16(v0, load(w)));
      acc1 = _mm_add_epi32(acc1, _mm_madd_epi16(v1, load(w + 8)));
    }
    store(dst, acc0);
    store(dst + 4, acc1);
  }
}

// Rows first, C = 2..4 where lanes do not fit: one output pixel per step (colour_group 2).
template <size_t C>
DSCACHE_SSE41 void horizontal_pixels(const HorizontalPlan& plan, const uint8_t* src, int32_t* dst) {
  auto pick = [](size_t ch, size_t byte) -> int8_t {
    return ch < C ? static_cast<int8_t>(byte) : kZ;
  };
  const __m128i control =
      _mm_setr_epi8(pick(0, 0), kZ, pick(0, C), kZ, pick(1, 1), kZ, pick(1, C + 1), kZ, pick(2, 2),
                    kZ, pick(2, C + 2), kZ, pick(3, 3), kZ, pick(3, C + 3), kZ);
  for (uint32_t ox = 0; ox < plan.padded_w; ++ox, dst += C) {
    const int16_t* w = plan.weight.data() + size_t{ox / 2} * plan.pairs * 16 + ox % 2 * 8;
    const uint8_t* s = src + plan.start[ox];
    __m128i acc = _mm_setzero_si128();
    for (uint32_t p = 0; p < plan.pairs; ++p, w += 16, s += 2 * C) {
      acc = _mm_add_epi32(acc, _mm_madd_epi16(_mm_shuffle_epi8(load(s), control), load(w)));
    }
    store(dst, acc);  // four lanes, the next pixel overwriting the unused ones
  }
}

// Rows first, one channel where lanes do not fit: four outputs per step (grey_group 4), each
// lane the 4 bytes at its pair.
DSCACHE_SSE41 void horizontal_grey(const HorizontalPlan& plan, const uint8_t* src, int32_t* dst) {
  const __m128i control = _mm_setr_epi8(0, kZ, 1, kZ, 4, kZ, 5, kZ, 8, kZ, 9, kZ, 12, kZ, 13, kZ);
  const int16_t* w = plan.weight.data();
  for (uint32_t ox = 0; ox < plan.padded_w; ox += 4, dst += 4) {
    const uint32_t* at = plan.start.data() + ox;
    __m128i acc = _mm_setzero_si128();
    for (uint32_t p = 0; p < plan.pairs; ++p, w += 8) {
      int32_t word[4];
      for (int j = 0; j < 4; ++j) std::memcpy(&word[j], src + at[j] + 2 * p, 4);
      const __m128i v = _mm_shuffle_epi8(load(word), control);
      acc = _mm_add_epi32(acc, _mm_madd_epi16(v, load(w)));
    }
    store(dst, acc);
  }
}

DSCACHE_SSE41 void horizontal(const HorizontalPlan& plan, const uint8_t* src, int32_t* dst) {
  if (plan.lanes) return horizontal_lanes(plan, src, dst);
  switch (plan.channels) {
    case 1:
      return horizontal_grey(plan, src, dst);
    case 2:
      return horizontal_pixels<2>(plan, src, dst);
    case 3:
      return horizontal_pixels<3>(plan, src, dst);
    default:
      return horizontal_pixels<4>(plan, src, dst);
  }
}

DSCACHE_SSE41 void horizontal2(const HorizontalPlan& plan, const uint8_t* src0, const uint8_t* src1,
                               int32_t* dst0, int32_t* dst1) {
  horizontal(plan, src0, dst0);
  horizontal(plan, src1, dst1);
}

// 16 outputs from int32 rows: weighted sums (exact: < 2^31), rounded, packed to bytes.
DSCACHE_SSE41 inline __m128i vertical_16(const int32_t* const* rows, const int32_t* weight,
                                         uint32_t taps, size_t i) {
  const __m128i half = _mm_set1_epi32(int32_t{1} << (2 * kResampleBits - 1));
  __m128i acc[4] = {half, half, half, half};
  for (uint32_t k = 0; k < taps; ++k) {
    const __m128i w = _mm_set1_epi32(weight[k]);
    for (int j = 0; j < 4; ++j) {
      acc[j] = _mm_add_epi32(acc[j], _mm_mullo_epi32(load(rows[k] + i + 4 * j), w));
    }
  }
  for (int j = 0; j < 4; ++j) acc[j] = _mm_srai_epi32(acc[j], 2 * kResampleBits);
  return _mm_packus_epi16(_mm_packs_epi32(acc[0], acc[1]), _mm_packs_epi32(acc[2], acc[3]));
}

DSCACHE_SSE41 void vertical(const int32_t* const* rows, const int32_t* weight, uint32_t taps,
                            size_t n, uint8_t* dst) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) store(dst + i, vertical_16(rows, weight, taps, i));
  if (i < n) {
    uint8_t tail[16];
    store(tail, vertical_16(rows, weight, taps, i));
    std::memcpy(dst + i, tail, n - i);
  }
}

// Columns first: 16 bytes of each of two rows interleaved bytewise, widened to (a, b) int16
// pairs, pmaddwd with (w_a, w_b); in order within the one lane. An odd last row pairs with
// itself at weight 0.
DSCACHE_SSE41 void columns(const uint8_t* const* rows, const int32_t* weight, uint32_t taps,
                           size_t n, int32_t* dst) {
  const __m128i zero = _mm_setzero_si128();
  for (size_t i = 0; i < n; i += 16) {
    __m128i s[4] = {zero, zero, zero, zero};
    for (uint32_t k = 0; k < taps; k += 2) {
      const bool both = k + 1 < taps;
      const __m128i w = _mm_set1_epi32(weight[k] | ((both ? weight[k + 1] : 0) << 16));
      const __m128i a = load(rows[k] + i), b = both ? load(rows[k + 1] + i) : zero;
      const __m128i x = _mm_unpacklo_epi8(a, b), y = _mm_unpackhi_epi8(a, b);
      s[0] = _mm_add_epi32(s[0], _mm_madd_epi16(_mm_unpacklo_epi8(x, zero), w));
      s[1] = _mm_add_epi32(s[1], _mm_madd_epi16(_mm_unpackhi_epi8(x, zero), w));
      s[2] = _mm_add_epi32(s[2], _mm_madd_epi16(_mm_unpacklo_epi8(y, zero), w));
      s[3] = _mm_add_epi32(s[3], _mm_madd_epi16(_mm_unpackhi_epi8(y, zero), w));
    }
    for (int j = 0; j < 4; ++j) store(dst + i + 4 * j, s[j]);
  }
}

// Columns first, the horizontal pass: one output pixel per step (pixel_group 2), its 4 bytes
// stored, the next overwriting the unused ones.
template <size_t C>
DSCACHE_SSE41 void pixels(const HorizontalPlan& plan, const int32_t* src, uint8_t* dst) {
  const __m128i half = _mm_set1_epi32(int32_t{1} << (2 * kResampleBits - 1));
  for (uint32_t ox = 0; ox < plan.padded_w; ++ox, dst += C) {
    const int32_t* w = plan.weight32.data() + size_t{ox / 2} * plan.window * 8 + ox % 2 * 4;
    const int32_t* s = src + plan.start[ox];
    __m128i acc = half;
    for (uint32_t j = 0; j < plan.window; ++j, w += 8, s += C) {
      acc = _mm_add_epi32(acc, _mm_mullo_epi32(load(s), load(w)));
    }
    acc = _mm_srai_epi32(acc, 2 * kResampleBits);
    const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(acc, acc), acc);
    const int32_t px = _mm_cvtsi128_si32(bytes);
    std::memcpy(dst, &px, 4);
  }
}

DSCACHE_SSE41 void any_pixels(const HorizontalPlan& plan, const int32_t* src, uint8_t* dst) {
  switch (plan.channels) {
    case 1:
      return pixels<1>(plan, src, dst);
    case 2:
      return pixels<2>(plan, src, dst);
    case 3:
      return pixels<3>(plan, src, dst);
    default:
      return pixels<4>(plan, src, dst);
  }
}

const ResampleKernels kSse41{4, 2, 2, horizontal, horizontal2, vertical, columns, any_pixels};

}  // namespace

const ResampleKernels* resample_sse41_kernels() {
  // __builtin_cpu_init first: this may run before libgcc's own constructor has filled in the
  // CPU model (a static initializer elsewhere resampling).
  static const bool has = (__builtin_cpu_init(), __builtin_cpu_supports("sse4.1"));
  return has ? &kSse41 : nullptr;
}

#else

const ResampleKernels* resample_sse41_kernels() { return nullptr; }

#endif

}  // namespace detail
}  // namespace dscache
