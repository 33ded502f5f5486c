// A row-streaming INTER_AREA downscaler: source rows go in top to bottom, the output fills as
// they arrive, and memory stays O(output width). Private to the ingest library.
//
// It reproduces OpenCV's cv::resize(INTER_AREA) for 8-bit images byte for byte (OpenCV 4.6,
// modules/imgproc/src/resize.cpp): the same choice between the integer-factor block average and
// the fractional-weight table, the same float weights and the same order of float additions, so
// a streamed PNG gives the pixels a whole-image decode + cv::resize gives. Tested against
// cv::resize in tests/test_decode_stream.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dscache {

// Shrinks a src_w x src_h image of `cn` (1..4) 8-bit channels to dst_w x dst_h, written to
// `dst` (dst_h rows of dst_w * cn bytes, caller-owned, must outlive the resizer). Not
// thread-safe; one image per object.
class AreaResizer {
 public:
  // True when cv::resize(INTER_AREA) of these sizes is a true area average (not shrinking in
  // some axis makes OpenCV fall back to bilinear, which this class does not do) and the output
  // differs from the input in size.
  static bool applies(uint32_t src_w, uint32_t src_h, uint32_t dst_w, uint32_t dst_h);

  // Requires applies(src_w, src_h, dst_w, dst_h) and cn in 1..4.
  AreaResizer(uint32_t src_w, uint32_t src_h, uint32_t dst_w, uint32_t dst_h, int cn, uint8_t* dst);

  // The next source row (src_w * cn bytes). Call exactly src_h times.
  void push_row(const uint8_t* row);
  // True once every source row has been pushed: `dst` holds the image.
  bool done() const { return next_row_ == src_h_; }

 private:
  struct Weight {  // source sample `si` adds `alpha` times itself to output sample `di`
    int si;
    int di;
    float alpha;
  };
  void push_fast(const uint8_t* row);
  void push_weighted(const uint8_t* row);
  void flush_weighted(int dy);
  template <int kCn>
  static void accumulate(const std::vector<Weight>& xtab, const std::vector<size_t>& starts,
                         const uint8_t* row, float* buf);

  int src_w_, src_h_, dst_w_, dst_h_, cn_;
  uint8_t* dst_;
  int next_row_ = 0;
  // Integer factors (OpenCV's resizeAreaFast): block sums per output sample.
  bool fast_ = false;
  int kx_ = 1, ky_ = 1;
  std::vector<int> block_;
  // Fractional factors (OpenCV's resizeArea): weight tables and the float row accumulators.
  std::vector<Weight> xtab_, ytab_;
  std::vector<size_t> xstart_;  // xtab_ entries of output pixel d: [xstart_[d], xstart_[d + 1])
  size_t next_y_ = 0;           // the first ytab_ entry not yet applied
  int prev_dy_ = 0;
  std::vector<float> buf_, sum_;
};

}  // namespace dscache
