// JPEG sources through libcache's decoder (jpeg_direct.h).
#include "jpeg_direct.h"

#include <new>

#include "dscache/error.h"
#include "dscache/jpeg.h"
#include "source_bytes.h"

namespace dscache {
namespace detail {

bool decode_jpeg_rgb(const uint8_t* data, size_t size, uint32_t width, uint32_t height,
                     int reduction, uint32_t channels, bool ignore_orientation, cv::Mat* img) {
  if (!jpeg_supported() || (channels != 1 && channels != 3)) return false;
  if (reduction != 1 && reduction != 2 && reduction != 4 && reduction != 8) return false;
  if (!ignore_orientation && !jpeg_orientation_is_identity(data, size)) return false;
  const uint32_t denom = static_cast<uint32_t>(reduction);
  try {
    thread_local JpegScratch scratch;  // one decoder per thread (the build's pipeline threads)
    img->create(static_cast<int>(jpeg_scaled_side(height, denom)),
                static_cast<int>(jpeg_scaled_side(width, denom)),
                CV_8UC(static_cast<int>(channels)));
    jpeg_decode_scaled(data, size, height, width, channels, denom, img->data, &scratch);
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
