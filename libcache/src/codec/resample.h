// Fixed-point separable resampling shared by crop_resize (transform.cpp) and the JPEG crop
// decoder (jpeg.cpp, jpeg_crop.cpp): per-axis taps plus one two-pass kernel, so both give the
// same bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dscache {
namespace detail {

// Weights are integers scaled by kResampleOne; every output's weights sum to exactly
// kResampleOne (so flat areas stay flat).
constexpr int kResampleBits = 11;
constexpr int32_t kResampleOne = 1 << kResampleBits;

// Resampling weights along one axis: output o reads taps [first[o], first[o] + count[o]) of
// `index`/`weight`. Indices are relative to the pointer handed to resample().
struct AxisTaps {
  std::vector<uint32_t> first;  // per output: first tap
  std::vector<uint32_t> count;  // per output: number of taps
  std::vector<uint32_t> index;  // source coordinate of each tap
  std::vector<int32_t> weight;  // weight of each tap, /kResampleOne
};

// crop_resize's rule for `in` source pixels to `out`: bilinear with half-pixel centres
// (cv::INTER_LINEAR geometry) when in < 2*out; the mean over each output pixel's exact
// footprint (cv::INTER_AREA) when in >= 2*out. Indices are 0..in-1.
AxisTaps make_taps(uint32_t in, uint32_t out);

// The footprint rule of make_taps (in >= 2*out) for a source that was decoded at scale
// scale_num/8: full-resolution pixels [start, start + in) cover scaled coordinates
// [start*s, (start + in)*s), s = scale_num/8, and output o averages its footprint
// [(start + o*in/out)*s, (start + (o+1)*in/out)*s) weighted by overlap with each scaled pixel.
// Indices are relative to scaled pixel `region_start` and stay below region_start + region_len
// (the footprint is clipped there). scale_num 8 with region_start == start gives make_taps.
AxisTaps make_scaled_area_taps(uint32_t start, uint32_t in, uint32_t out, uint32_t scale_num,
                               uint32_t region_start, uint32_t region_len);

// One past the largest index of `taps` (how many source pixels a pass reads).
uint32_t taps_extent(const AxisTaps& taps);

// Resamples an HWC uint8 image at `origin` (rows `stride` bytes apart) into out_h x out_w x
// channels bytes at `out` with taps ty (rows) and tx (columns), mirrored when `flip`: the sum of
// weight_y * weight_x * pixel over the taps, rounded half up once at the end. `row` is a
// reusable buffer. Runs the fastest path this CPU has (chosen once); every path gives the same
// bytes as resample_reference. Reads nothing past the last tapped row's last tapped pixel; the
// SIMD paths read up to 32 bytes past a row's last tapped pixel where a later tapped row lies
// that far on (the rows from `origin` to the last tapped one are one block of memory).
void resample(const uint8_t* origin, size_t stride, size_t channels, const AxisTaps& ty,
              const AxisTaps& tx, uint32_t out_h, uint32_t out_w, bool flip, uint8_t* out,
              std::vector<int32_t>* row);

// The plain scalar kernel resample() must match byte for byte: a vertical pass into `row`
// (scaled by kResampleOne), then a horizontal pass. Every path falls back to it for what it
// does not cover.
void resample_reference(const uint8_t* origin, size_t stride, size_t channels, const AxisTaps& ty,
                        const AxisTaps& tx, uint32_t out_h, uint32_t out_w, bool flip, uint8_t* out,
                        std::vector<int32_t>* row);

// The implementations of resample(), for tests and benchmarks that compare them.
enum class ResamplePath {
  kScalar,        // resample_reference
  kSse41Rows,     // x86-64 with SSE4.1, horizontal pass first (pmaddwd on pixel pairs)
  kSse41Columns,  // ... vertical pass first (pmaddwd on row pairs)
  kSse41,         // ... whichever order is estimated cheaper for the shape
  kAvx2Rows,      // the same with AVX2
  kAvx2Columns,
  kAvx2,
};

// The paths this CPU can run, slowest first (kScalar always; the last is what resample() uses).
std::vector<ResamplePath> resample_paths();

// resample() on a given path (one this CPU lacks runs resample_reference).
void resample_with(ResamplePath path, const uint8_t* origin, size_t stride, size_t channels,
                   const AxisTaps& ty, const AxisTaps& tx, uint32_t out_h, uint32_t out_w,
                   bool flip, uint8_t* out, std::vector<int32_t>* row);

}  // namespace detail
}  // namespace dscache
