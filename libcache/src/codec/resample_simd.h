// The machinery shared by resample()'s SIMD paths: the horizontal taps laid out for vector
// kernels, the kernels' table, and the horizontal-first driver that calls them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/resample.h"

namespace dscache {
namespace detail {

// Bytes a horizontal kernel may read past a row's last tapped pixel (the driver copies a row
// whose next bytes are not known to be readable).
constexpr size_t kResampleReadPad = 32;

// The horizontal taps of one call as the kernels want them: output pixel o reads source pixels
// [start, start + window) (zero weights past its own taps), in groups of `group` outputs.
// Rows first, `weight` pairs taps: group g, pair p, output i at ((g * pairs + p) * group + i) *
// lane holds, for channels == 1, lane 2 (w[2p], w[2p+1]); else lane 8, (w[2p], w[2p+1]) once
// per channel (up to 4), zeros after (reads reach 2 * pairs pixels). Columns first, `weight32`
// group g, tap j, output i at ((g * window + j) * group + i) * 4 holds w[j] four times.
struct HorizontalPlan {
  size_t channels = 0;
  uint32_t out_w = 0;
  uint32_t padded_w = 0;        // out_w rounded up to a whole group
  uint32_t lo = 0, extent = 0;  // source pixels [lo, extent) are tapped
  uint32_t window = 0;          // taps per output
  uint32_t pairs = 0;           // window / 2, rounded up
  std::vector<uint32_t> start;  // per output (padded_w): its first pixel's offset from lo, times
                                // channels (bytes of a source row, int32 of a column-pass row)
  std::vector<int16_t> weight;
  std::vector<int32_t> weight32;
  // Rows first where every lane fits (then start, padded_w and the layout above do not apply):
  // 8 output values per step, each 128-bit lane of 4 taking pair p's bytes from the 16 at its
  // lane_base with its 16 lane_control bytes (pshufb), weights (w[2p], w[2p+1]) per value in
  // `weight`; chunk i, pair p, lane l at (i * pairs + p) * 2 + l.
  bool lanes = false;
  uint32_t chunks = 0;  // steps of 8 values per row
  std::vector<uint32_t> lane_base;
  std::vector<uint8_t> lane_control;
};

// The kernels of one instruction set. None keeps state; all may run on any thread.
struct ResampleKernels {
  uint32_t grey_group;    // outputs per rows-first horizontal step, 1 channel
  uint32_t colour_group;  // ... 2..4 channels
  uint32_t pixel_group;   // outputs per columns-first horizontal step
  // Rows first: one source row (pixel `lo` at `src`, readable kResampleReadPad bytes past pixel
  // `extent`) into padded_w * channels int32 (plus 8 more written) at `dst`, scaled by
  // kResampleOne.
  void (*horizontal)(const HorizontalPlan& plan, const uint8_t* src, int32_t* dst);
  // ... the same for two rows at once (the plan read once).
  void (*horizontal2)(const HorizontalPlan& plan, const uint8_t* src0, const uint8_t* src1,
                      int32_t* dst0, int32_t* dst1);
  // ... then dst[i] = (sum_k weight[k] * rows[k][i] + 2^21) >> 22 for i < n; rows are readable
  // to n + 32 int32.
  void (*vertical)(const int32_t* const* rows, const int32_t* weight, uint32_t taps, size_t n,
                   uint8_t* dst);
  // Columns first: dst[i] = sum_k weight[k] * rows[k][i] for i < n rounded up to 32 (rows
  // readable kResampleReadPad bytes past n) ...
  void (*columns)(const uint8_t* const* rows, const int32_t* weight, uint32_t taps, size_t n,
                  int32_t* dst);
  // ... then each output pixel from that row (pixel `lo` at `src`, readable 8 int32 past
  // pixel `extent`), rounded: padded_w * channels bytes (plus 4 more written) at `dst`.
  void (*pixels)(const HorizontalPlan& plan, const int32_t* src, uint8_t* dst);
};

// The AVX2 kernels, or null where the CPU (or the build's target) has no AVX2.
const ResampleKernels* resample_avx2_kernels();
// The SSE4.1 kernels, or null where the CPU (or the build's target) has no SSE4.1.
const ResampleKernels* resample_sse41_kernels();

// Which pass resample_simd() runs first.
enum class PassOrder {
  kCheaper,  // by an estimate of each order's cost for the shape
  kRows,     // horizontal first: each tapped source row filtered once into a ring of int32
             // rows, then each output row summed from its rows (good for mild scaling)
  kColumns,  // vertical first: each output row's source rows summed into one int32 row, then
             // filtered (good for strong downscaling: fewer rows meet the costlier pass)
};

// resample() with `kernels` in `order`. False, with nothing written, for what the kernels do
// not cover: channels outside 1..4, taps too far apart, weights that are negative or do not sum
// to kResampleOne per output (the bounds that keep every sum exact in int16 and int32).
bool resample_simd(const ResampleKernels& kernels, PassOrder order, const uint8_t* origin,
                   size_t stride, size_t channels, const AxisTaps& ty, const AxisTaps& tx,
                   uint32_t out_h, uint32_t out_w, bool flip, uint8_t* out,
                   std::vector<int32_t>* buffer);

}  // namespace detail
}  // namespace dscache
