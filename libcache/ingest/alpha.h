// A source's alpha before its pixels are placed: its 8-bit BGRA form with the transparency seen,
// and the blend onto a background colour (dscache build --alpha). Private to the ingest library;
// whether a header promises alpha is source_bytes.h's.
#pragma once

#include <cstdint>

#include <opencv2/core.hpp>

namespace dscache {
namespace detail {

// `u` (IMREAD_UNCHANGED: BGRA, 8- or 16-bit) reduced to 8-bit BGRA the way IMREAD_COLOR
// reduces 16-bit PNGs (libpng's strip_16 keeps the high byte), and whether any alpha is below
// its maximum at the source's depth.
cv::Mat bgra8(const cv::Mat& u, bool* transparent);

// 8-bit BGRA blended onto `rgb` (R, G, B): BGR, (c * a + bg * (255 - a) + 127) / 255 exactly.
cv::Mat composite(const cv::Mat& bgra, const uint8_t rgb[3]);

}  // namespace detail
}  // namespace dscache
