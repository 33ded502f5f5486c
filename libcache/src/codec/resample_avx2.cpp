// resample()'s AVX2 kernels (see resample_simd.h). Compiled for baseline x86-64: only these
// functions carry target("avx2"), and resample_avx2_kernels() hands them out only where the
// CPU has AVX2, so nothing here runs elsewhere. Other architectures get null.
#include "codec/resample_simd.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#define DSCACHE_RESAMPLE_AVX2 1
#define DSCACHE_AVX2 __attribute__((target("avx2")))
#endif

namespace dscache {
namespace detail {

#ifdef DSCACHE_RESAMPLE_AVX2
namespace {

// Two output pixels per step of C = 2..4 channels, one per 128-bit lane: the 16 source bytes at
// the pair's first pixel shuffled to int16 (a.ch, b.ch) pairs, one per channel, then pmaddwd
// with (w[2p], w[2p+1]) gives the channel's exact int32 sum. P = pairs, 0 when not fixed.
template <size_t C, uint32_t P>
DSCACHE_AVX2 void horizontal_pixels(const HorizontalPlan& plan, const uint8_t* src, int32_t* dst) {
  constexpr int8_t kZ = -128;  // pshufb: a zero byte
  auto pick = [](size_t ch, size_t byte) -> int8_t {
    return ch < C ? static_cast<int8_t>(byte) : kZ;
  };
  const __m128i lane =
      _mm_setr_epi8(pick(0, 0), kZ, pick(0, C), kZ, pick(1, 1), kZ, pick(1, C + 1), kZ, pick(2, 2),
                    kZ, pick(2, C + 2), kZ, pick(3, 3), kZ, pick(3, C + 3), kZ);
  const __m256i control = _mm256_broadcastsi128_si256(lane);
  const uint32_t pairs = P != 0 ? P : plan.pairs;
  const uint32_t* start = plan.start.data();
  const __m256i* w = reinterpret_cast<const __m256i*>(plan.weight.data());
  for (uint32_t ox = 0; ox < plan.padded_w; ox += 2, start += 2, dst += 2 * C) {
    __m256i acc = _mm256_setzero_si256();
    for (uint32_t p = 0; p < pairs; ++p, ++w) {
      const uint8_t* a = src + start[0] + 2 * p * C;
      const uint8_t* b = src + start[1] + 2 * p * C;
      __m256i v = _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)));
      v = _mm256_inserti128_si256(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
      v = _mm256_shuffle_epi8(v, control);
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(v, _mm256_loadu_si256(w)));
    }
    // Four lanes each, the next store overwriting this one's unused lanes.
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(acc));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + C), _mm256_extracti128_si256(acc, 1));
  }
}

// One channel: eight outputs per step, each lane gathering the 4 bytes at its pair.
DSCACHE_AVX2 void horizontal_grey(const HorizontalPlan& plan, const uint8_t* src, int32_t* dst) {
  constexpr int8_t kZ = -128;
  const __m256i control =
      _mm256_setr_epi8(0, kZ, 1, kZ, 4, kZ, 5, kZ, 8, kZ, 9, kZ, 12, kZ, 13, kZ, 0, kZ, 1, kZ, 4,
                       kZ, 5, kZ, 8, kZ, 9, kZ, 12, kZ, 13, kZ);
  const int* base = reinterpret_cast<const int*>(src);
  const __m256i* w = reinterpret_cast<const __m256i*>(plan.weight.data());
  for (uint32_t ox = 0; ox < plan.padded_w; ox += 8, dst += 8) {
    __m256i at = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(plan.start.data() + ox));
    __m256i acc = _mm256_setzero_si256();
    for (uint32_t p = 0; p < plan.pairs; ++p, ++w) {
      const __m256i v = _mm256_shuffle_epi8(_mm256_i32gather_epi32(base, at, 1), control);
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(v, _mm256_loadu_si256(w)));
      at = _mm256_add_epi32(at, _mm256_set1_epi32(2));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), acc);
  }
}

template <size_t C>
DSCACHE_AVX2 void horizontal_any_pairs(const HorizontalPlan& plan, const uint8_t* src,
                                       int32_t* dst) {
  switch (plan.pairs) {
    case 1:
      return horizontal_pixels<C, 1>(plan, src, dst);
    case 2:
      return horizontal_pixels<C, 2>(plan, src, dst);
    default:
      return horizontal_pixels<C, 0>(plan, src, dst);
  }
}

// horizontal_lanes for two rows at once: the plan's bases, controls and weights loaded once.
template <uint32_t P>
DSCACHE_AVX2 void horizontal_lanes2(const HorizontalPlan& plan, const uint8_t* src0,
                                    const uint8_t* src1, int32_t* dst0, int32_t* dst1) {
  const uint32_t pairs = P != 0 ? P : plan.pairs;
  const uint32_t* base = plan.lane_base.data();
  const __m256i* control = reinterpret_cast<const __m256i*>(plan.lane_control.data());
  const __m256i* w = reinterpret_cast<const __m256i*>(plan.weight.data());
  for (uint32_t i = 0; i < plan.chunks; ++i, dst0 += 8, dst1 += 8) {
    __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
    for (uint32_t p = 0; p < pairs; ++p, base += 2, ++control, ++w) {
      const __m256i ctl = _mm256_loadu_si256(control), wp = _mm256_loadu_si256(w);
      __m256i v0 =
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src0 + base[0])));
      v0 = _mm256_inserti128_si256(
          v0, _mm_loadu_si128(reinterpret_cast<const __m128i*>(src0 + base[1])), 1);
      __m256i v1 =
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src1 + base[0])));
      v1 = _mm256_inserti128_si256(
          v1, _mm_loadu_si128(reinterpret_cast<const __m128i*>(src1 + base[1])), 1);
      acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(_mm256_shuffle_epi8(v0, ctl), wp));
      acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(_mm256_shuffle_epi8(v1, ctl), wp));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst0), acc0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst1), acc1);
  }
}

// Eight output values per step (any channel count): each 128-bit lane's 16 source bytes
// shuffled into its 4 values' (a, b) int16 pairs, then pmaddwd. P as above.
template <uint32_t P>
DSCACHE_AVX2 void horizontal_lanes(const HorizontalPlan& plan, const uint8_t* src, int32_t* dst) {
  const uint32_t pairs = P != 0 ? P : plan.pairs;
  const uint32_t* base = plan.lane_base.data();
  const __m256i* control = reinterpret_cast<const __m256i*>(plan.lane_control.data());
  const __m256i* w = reinterpret_cast<const __m256i*>(plan.weight.data());
  for (uint32_t i = 0; i < plan.chunks; ++i, dst += 8) {
    __m256i acc = _mm256_setzero_si256();
    for (uint32_t p = 0; p < pairs; ++p, base += 2, ++control, ++w) {
      __m256i v =
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + base[0])));
      v = _mm256_inserti128_si256(
          v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + base[1])), 1);
      v = _mm256_shuffle_epi8(v, _mm256_loadu_si256(control));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(v, _mm256_loadu_si256(w)));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), acc);
  }
}

DSCACHE_AVX2 void horizontal(const HorizontalPlan& plan, const uint8_t* src, int32_t* dst) {
  if (plan.lanes) {
    switch (plan.pairs) {
      case 1:
        return horizontal_lanes<1>(plan, src, dst);
      case 2:
        return horizontal_lanes<2>(plan, src, dst);
      default:
        return horizontal_lanes<0>(plan, src, dst);
    }
  }
  switch (plan.channels) {
    case 1:
      return horizontal_grey(plan, src, dst);
    case 2:
      return horizontal_any_pairs<2>(plan, src, dst);
    case 3:
      return horizontal_any_pairs<3>(plan, src, dst);
    default:
      return horizontal_any_pairs<4>(plan, src, dst);
  }
}

DSCACHE_AVX2 void horizontal2(const HorizontalPlan& plan, const uint8_t* src0, const uint8_t* src1,
                              int32_t* dst0, int32_t* dst1) {
  if (!plan.lanes) {
    horizontal(plan, src0, dst0);
    return horizontal(plan, src1, dst1);
  }
  switch (plan.pairs) {
    case 1:
      return horizontal_lanes2<1>(plan, src0, src1, dst0, dst1);
    case 2:
      return horizontal_lanes2<2>(plan, src0, src1, dst0, dst1);
    default:
      return horizontal_lanes2<0>(plan, src0, src1, dst0, dst1);
  }
}

// 32 outputs from int32 rows: weighted sums (exact: < 2^31), rounded, packed to bytes. T taps
// when fixed (their weights broadcast once per row, in w), else 0.
template <uint32_t T>
DSCACHE_AVX2 inline __m256i vertical_32(const int32_t* const* rows, const int32_t* weight,
                                        const __m256i* w, uint32_t taps, size_t i) {
  const __m256i half = _mm256_set1_epi32(int32_t{1} << (2 * kResampleBits - 1));
  __m256i acc[4] = {half, half, half, half};
  for (uint32_t k = 0; k < (T != 0 ? T : taps); ++k) {
    const __m256i wk = T != 0 ? w[k] : _mm256_set1_epi32(weight[k]);
    const int32_t* r = rows[k] + i;
    for (int j = 0; j < 4; ++j) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r + 8 * j));
      acc[j] = _mm256_add_epi32(acc[j], _mm256_mullo_epi32(v, wk));
    }
  }
  for (int j = 0; j < 4; ++j) acc[j] = _mm256_srai_epi32(acc[j], 2 * kResampleBits);
  // packs works within 128-bit lanes: the permute puts the 4-byte groups back in order.
  const __m256i bytes =
      _mm256_packus_epi16(_mm256_packs_epi32(acc[0], acc[1]), _mm256_packs_epi32(acc[2], acc[3]));
  return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

template <uint32_t T>
DSCACHE_AVX2 void vertical_taps(const int32_t* const* rows, const int32_t* weight, uint32_t taps,
                                size_t n, uint8_t* dst) {
  __m256i w[T != 0 ? T : 1];
  for (uint32_t k = 0; k < T; ++k) w[k] = _mm256_set1_epi32(weight[k]);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        vertical_32<T>(rows, weight, w, taps, i));
  }
  if (i < n) {
    uint8_t tail[32];
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(tail), vertical_32<T>(rows, weight, w, taps, i));
    std::memcpy(dst + i, tail, n - i);
  }
}

DSCACHE_AVX2 void vertical(const int32_t* const* rows, const int32_t* weight, uint32_t taps,
                           size_t n, uint8_t* dst) {
  switch (taps) {
    case 1:
      return vertical_taps<1>(rows, weight, taps, n, dst);
    case 2:
      return vertical_taps<2>(rows, weight, taps, n, dst);
    case 3:
      return vertical_taps<3>(rows, weight, taps, n, dst);
    default:
      return vertical_taps<0>(rows, weight, taps, n, dst);
  }
}

// Columns first: 32 bytes of each of two rows interleaved byte by byte, widened to (a, b) int16
// pairs and multiplied by (w_a, w_b) with pmaddwd. Unpacking works within 128-bit lanes, so
// the four sums hold values 0-3|16-19, 4-7|20-23, 8-11|24-27, 12-15|28-31, put back in order
// when stored. An odd last row is paired with itself at weight 0.
DSCACHE_AVX2 void columns(const uint8_t* const* rows, const int32_t* weight, uint32_t taps,
                          size_t n, int32_t* dst) {
  constexpr uint32_t kMostPairs = 32;  // weights held at once; more taps: in steps
  const __m256i zero = _mm256_setzero_si256();
  for (uint32_t done = 0; done < taps; done += 2 * kMostPairs) {
    const uint32_t now = std::min(taps - done, 2 * kMostPairs), pairs = (now + 1) / 2;
    __m256i w[kMostPairs];
    const uint8_t* r[2 * kMostPairs];
    for (uint32_t k = 0; k < now; ++k) r[k] = rows[done + k];
    for (uint32_t p = 0; p < pairs; ++p) {
      const bool both = 2 * p + 1 < now;
      const int32_t wb = both ? weight[done + 2 * p + 1] : 0;
      w[p] = _mm256_set1_epi32(weight[done + 2 * p] | (wb << 16));
      if (!both) r[2 * p + 1] = r[2 * p];
    }
    for (size_t i = 0; i < n; i += 32) {
      __m256i s[4];
      for (int j = 0; j < 4; ++j) {
        s[j] = done == 0 ? zero
                         : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(dst + i + 8 * j));
      }
      // Partial sums come back in order: [0-3 4-7] [8-11 12-15] [16-19 20-23] [24-27 28-31].
      __m256i lo0 = _mm256_permute2x128_si256(s[0], s[2], 0x20);
      __m256i hi0 = _mm256_permute2x128_si256(s[0], s[2], 0x31);
      __m256i lo1 = _mm256_permute2x128_si256(s[1], s[3], 0x20);
      __m256i hi1 = _mm256_permute2x128_si256(s[1], s[3], 0x31);
      for (uint32_t p = 0; p < pairs; ++p) {
        const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r[2 * p] + i));
        const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r[2 * p + 1] + i));
        const __m256i x = _mm256_unpacklo_epi8(a, b), y = _mm256_unpackhi_epi8(a, b);
        lo0 = _mm256_add_epi32(lo0, _mm256_madd_epi16(_mm256_unpacklo_epi8(x, zero), w[p]));
        hi0 = _mm256_add_epi32(hi0, _mm256_madd_epi16(_mm256_unpackhi_epi8(x, zero), w[p]));
        lo1 = _mm256_add_epi32(lo1, _mm256_madd_epi16(_mm256_unpacklo_epi8(y, zero), w[p]));
        hi1 = _mm256_add_epi32(hi1, _mm256_madd_epi16(_mm256_unpackhi_epi8(y, zero), w[p]));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                          _mm256_permute2x128_si256(lo0, hi0, 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 8),
                          _mm256_permute2x128_si256(lo1, hi1, 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 16),
                          _mm256_permute2x128_si256(lo0, hi0, 0x31));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 24),
                          _mm256_permute2x128_si256(lo1, hi1, 0x31));
    }
  }
}

// Columns first, the horizontal pass: two output pixels per step, one per 128-bit lane (4
// channels' int32, the unused ones ignored), times each tap's weight, rounded and packed; each
// pixel's 4 bytes stored, the next overwriting the unused ones.
template <size_t C>
DSCACHE_AVX2 void pixels(const HorizontalPlan& plan, const int32_t* src, uint8_t* dst) {
  const __m256i half = _mm256_set1_epi32(int32_t{1} << (2 * kResampleBits - 1));
  const __m256i* w = reinterpret_cast<const __m256i*>(plan.weight32.data());
  const uint32_t* start = plan.start.data();
  for (uint32_t ox = 0; ox < plan.padded_w; ox += 2, start += 2, dst += 2 * C) {
    __m256i acc = half;
    const int32_t* a = src + start[0];
    const int32_t* b = src + start[1];
    for (uint32_t j = 0; j < plan.window; ++j, ++w, a += C, b += C) {
      __m256i v = _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)));
      v = _mm256_inserti128_si256(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
      acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(v, _mm256_loadu_si256(w)));
    }
    acc = _mm256_srai_epi32(acc, 2 * kResampleBits);
    const __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(acc, acc), acc);
    const int32_t pa = _mm256_cvtsi256_si32(bytes), pb = _mm256_extract_epi32(bytes, 4);
    std::memcpy(dst, &pa, 4);
    std::memcpy(dst + C, &pb, 4);
  }
}

DSCACHE_AVX2 void any_pixels(const HorizontalPlan& plan, const int32_t* src, uint8_t* dst) {
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

const ResampleKernels kAvx2{8, 2, 2, horizontal, horizontal2, vertical, columns, any_pixels};

}  // namespace

const ResampleKernels* resample_avx2_kernels() {
  // __builtin_cpu_init first: this may run before libgcc's own constructor has filled in the
  // CPU model (a static initializer elsewhere resampling).
  static const bool has = (__builtin_cpu_init(), __builtin_cpu_supports("avx2"));
  return has ? &kAvx2 : nullptr;
}

#else

const ResampleKernels* resample_avx2_kernels() { return nullptr; }

#endif

}  // namespace detail
}  // namespace dscache
