// Alpha: the 8-bit BGRA reduction and the background blend (alpha.h).
#include "alpha.h"

#include <opencv2/core.hpp>

namespace dscache {
namespace detail {

cv::Mat bgra8(const cv::Mat& u, bool* transparent) {
  cv::Mat alpha;
  cv::extractChannel(u, alpha, 3);
  double lo = 0;
  cv::minMaxLoc(alpha, &lo);
  *transparent = lo < (u.depth() == CV_16U ? 65535.0 : 255.0);
  if (u.depth() == CV_8U) return u;
  cv::Mat out(u.rows, u.cols, CV_8UC4);
  for (int y = 0; y < u.rows; ++y) {
    const uint16_t* in = u.ptr<uint16_t>(y);
    uint8_t* o = out.ptr<uint8_t>(y);
    for (int x = 0; x < u.cols * 4; ++x) o[x] = static_cast<uint8_t>(in[x] >> 8);
  }
  return out;
}

cv::Mat composite(const cv::Mat& bgra, const uint8_t rgb[3]) {
  const uint32_t bg[3] = {rgb[2], rgb[1], rgb[0]};  // in OpenCV's B, G, R order
  cv::Mat out(bgra.rows, bgra.cols, CV_8UC3);
  for (int y = 0; y < bgra.rows; ++y) {
    const uint8_t* in = bgra.ptr<uint8_t>(y);
    uint8_t* o = out.ptr<uint8_t>(y);
    for (int x = 0; x < bgra.cols; ++x, in += 4, o += 3) {
      const uint32_t a = in[3];
      for (int c = 0; c < 3; ++c)
        o[c] = static_cast<uint8_t>((in[c] * a + bg[c] * (255 - a) + 127) / 255);
    }
  }
  return out;
}

}  // namespace detail
}  // namespace dscache
