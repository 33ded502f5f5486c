// The machinery shared by resample()'s SIMD paths: the horizontal taps laid out for vector
// kernels, the kernels' table, and the horizontal-first driver that calls them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "resample.h"

namespace dscache {
namespace detail {

// Bytes a horizontal kernel may read past a row's last tapped pixel (the driver copies a row
// whose next bytes are not known to be readable).
constexpr size_t kResampleReadPad = 32;

// The horizontal taps of one call as the kernels want them: output pixel o reads source pixels
// [start, start + 2 * pairs) (zero weights past its own taps), in groups of `group` outputs.
// Weights of group g, pair p, output i of the group sit at ((g * pairs + p) * group + i) * lane:
// for channels == 1, lane 2 (w[2p], w[2p+1]); else lane 8, (w[2p], w[2p+1]) once per channel
// (up to 4), zeros after.
struct HorizontalPlan {
  size_t channels = 0;
  uint32_t out_w = 0;
  uint32_t padded_w = 0;        // out_w rounded up to a whole group
  uint32_t lo = 0, extent = 0;  // source pixels [lo, extent) are tapped
  uint32_t pairs = 0;           // taps per output / 2, rounded up
  std::vector<uint32_t> start;  // per output (padded_w): byte offset of its first pixel from lo
  std::vector<int16_t> weight;
};

// The kernels of one instruction set. Neither keeps state; both may run on any thread.
struct ResampleKernels {
  uint32_t grey_group;    // outputs per horizontal step (HorizontalPlan) for 1 channel
  uint32_t colour_group;  // ... and for 2..4
  // One source row (pixel `lo` at `src`, readable kResampleReadPad bytes past pixel `extent`)
  // into padded_w * channels int32 (plus 8 more written) at `dst`, scaled by kResampleOne.
  void (*horizontal)(const HorizontalPlan& plan, const uint8_t* src, int32_t* dst);
  // dst[i] = (sum_k weight[k] * rows[k][i] + 2^21) >> 22 for i < n; rows are readable to
  // n + 32 int32.
  void (*vertical)(const int32_t* const* rows, const int32_t* weight, uint32_t taps, size_t n,
                   uint8_t* dst);
};

// The AVX2 kernels, or null where the CPU (or the build's target) has no AVX2.
const ResampleKernels* resample_avx2_kernels();

// resample() horizontal pass first with `kernels`: each tapped source row filtered once into
// a ring of int32 rows, then each output row summed from its rows. False, with nothing
// written, for a shape the kernels do not cover (channels outside 1..4, taps too far apart).
bool resample_simd(const ResampleKernels& kernels, const uint8_t* origin, size_t stride,
                   size_t channels, const AxisTaps& ty, const AxisTaps& tx, uint32_t out_h,
                   uint32_t out_w, bool flip, uint8_t* out, std::vector<int32_t>* buffer);

}  // namespace detail
}  // namespace dscache
