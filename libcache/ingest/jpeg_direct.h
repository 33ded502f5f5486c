// JPEG sources decoded by libcache's JPEG decoder (dscache/jpeg.h) instead of OpenCV's imdecode,
// where that gives imdecode's pixels. Private to the ingest library (image_decode.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include <opencv2/core.hpp>

namespace dscache {
namespace detail {

// Decodes a JPEG of width x height (its frame header's size) at 1/reduction (1, 2, 4, 8) into
// `img` as RGB (channels 3) or grey (channels 1), and returns true; false when this path does
// not apply or fails, `img` then empty (the caller decodes with OpenCV, which decides and words
// any error). It applies where imdecode would give the same pixels in BGR order: both run
// Debian's libjpeg-turbo with the same settings (integer IDCT, fancy upsampling, DCT scaling
// scale_num/scale_denom = 1/reduction, RGB or grey out), and an EXIF orientation (unless
// ignore_orientation) is applied after the decode with imdecode's own flips and transposes (so
// `img` is the oriented image); not for EXIF blocks whose orientation jpeg_orientation cannot
// vouch for, 4-component (CMYK) streams, or streams libjpeg warns about (OpenCV decodes those
// leniently) or with bytes after EOI.
//
// Why: OpenCV 4.6 (Debian 12) has libjpeg produce RGB and swaps every row to BGR in a scalar
// loop, which a build then swaps back; that loop was a third of a JPEG build's CPU.
bool decode_jpeg_rgb(const uint8_t* data, size_t size, uint32_t width, uint32_t height,
                     int reduction, uint32_t channels, bool ignore_orientation, cv::Mat* img);

}  // namespace detail
}  // namespace dscache
