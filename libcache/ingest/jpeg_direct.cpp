// JPEG sources through libcache's decoder (jpeg_direct.h).
#include "jpeg_direct.h"

#include <new>

#include <opencv2/core.hpp>

#include "dscache/error.h"
#include "dscache/jpeg.h"
#include "source_bytes.h"

namespace dscache {
namespace detail {

namespace {

// Turns a decoded image as EXIF `orientation` (2..8) says, with the very operations OpenCV's
// imdecode applies (ApplyExifOrientation in OpenCV 4.x): pixels only move, so the result is
// imdecode's bit for bit whatever the channel order.
void apply_orientation(uint32_t orientation, cv::Mat* img) {
  switch (orientation) {
    case 2:  // top-right: mirrored
      cv::flip(*img, *img, 1);
      break;
    case 3:  // bottom-right: turned 180
      cv::flip(*img, *img, -1);
      break;
    case 4:  // bottom-left: upside down
      cv::flip(*img, *img, 0);
      break;
    case 5:  // left-top: transposed
      cv::transpose(*img, *img);
      break;
    case 6:  // right-top: turned 90 clockwise
      cv::transpose(*img, *img);
      cv::flip(*img, *img, 1);
      break;
    case 7:  // right-bottom: transverse
      cv::transpose(*img, *img);
      cv::flip(*img, *img, -1);
      break;
    case 8:  // left-bottom: turned 90 counter-clockwise
      cv::transpose(*img, *img);
      cv::flip(*img, *img, 0);
      break;
    default:  // 1: as stored
      break;
  }
}

}  // namespace

bool decode_jpeg_rgb(const uint8_t* data, size_t size, uint32_t width, uint32_t height,
                     int reduction, uint32_t channels, bool ignore_orientation, cv::Mat* img) {
  if (!jpeg_supported() || (channels != 1 && channels != 3)) return false;
  if (reduction != 1 && reduction != 2 && reduction != 4 && reduction != 8) return false;
  const uint32_t orientation = ignore_orientation ? 1 : jpeg_orientation(data, size);
  if (orientation == 0) return false;  // an EXIF block this reader does not vouch for
  const uint32_t denom = static_cast<uint32_t>(reduction);
  try {
    thread_local JpegScratch scratch;  // one decoder per thread (the build's pipeline threads)
    img->create(static_cast<int>(jpeg_scaled_side(height, denom)),
                static_cast<int>(jpeg_scaled_side(width, denom)),
                CV_8UC(static_cast<int>(channels)));
    jpeg_decode_scaled(data, size, height, width, channels, denom, img->data, &scratch);
    // After the decode, as imdecode does: DCT scaling works on the stored grid, and the caller's
    // reduction already allows for either orientation (choose_reduction in image_decode.cpp).
    apply_orientation(orientation, img);
    return true;
  } catch (const Error&) {  // CMYK, a libjpeg warning, trailing bytes, ...: OpenCV decides
  } catch (const cv::Exception&) {
  } catch (const std::bad_alloc&) {
  }
  img->release();
  return false;
}

}  // namespace detail
}  // namespace dscache
