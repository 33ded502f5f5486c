// The JPEG codec's byte-level checks: what a stream and a requested shape must be before
// libjpeg sees them (jpeg_internal.h). Plain byte walking; no libjpeg here.
#include <cstring>
#include <string>

#include "codec/jpeg_internal.h"
#include "dscache/error.h"

namespace dscache {
namespace detail {

Error jpeg_corrupt(const std::string& reason) {
  return Error(ErrorKind::kCorruption, "", "jpeg: " + reason);
}

Error jpeg_invalid(const std::string& reason) {
  return Error(ErrorKind::kInvalidArgument, "", "jpeg: " + reason);
}

size_t jpeg_first_image_end(const uint8_t* d, size_t n) {
  if (n < 4 || d[0] != 0xFF || d[1] != 0xD8) return 0;
  size_t p = 2;
  while (p + 1 < n) {
    if (d[p] != 0xFF) return 0;
    const uint8_t m = d[p + 1];
    if (m == 0xFF) {  // fill byte before a marker
      ++p;
      continue;
    }
    p += 2;
    if (m == 0xD9) return p;                              // EOI
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue;  // TEM, RSTn: no length
    if (p + 2 > n) return 0;
    const size_t len = size_t{d[p]} << 8 | d[p + 1];
    if (len < 2 || len > n - p) return 0;
    p += len;
    if (m != 0xDA) continue;
    // SOS: entropy-coded data, in which 0xFF is always followed by 0x00 (stuffing) or RSTn.
    while (true) {
      const void* ff = p < n ? std::memchr(d + p, 0xFF, n - p) : nullptr;
      if (ff == nullptr) return 0;
      p = static_cast<size_t>(static_cast<const uint8_t*>(ff) - d);
      if (p + 1 >= n) return 0;
      const uint8_t x = d[p + 1];
      if (x == 0x00 || (x >= 0xD0 && x <= 0xD7)) {
        p += 2;
      } else {
        break;  // a marker (or fill bytes before one): the outer loop reads it
      }
    }
  }
  return 0;
}

void check_jpeg_stream(const uint8_t* data, size_t size) {
  if (data == nullptr || size == 0) throw jpeg_corrupt("empty stream (0 bytes)");
  if (size < 4) throw jpeg_corrupt(std::to_string(size) + " bytes is too short for a JPEG stream");
  if (data[size - 2] != 0xFF || data[size - 1] != 0xD9) {
    throw jpeg_corrupt("stream does not end with an EOI marker (truncated or trailing bytes)");
  }
  if (data[0] != 0xFF || data[1] != 0xD8) return;  // not a JPEG at all: libjpeg says so
  const size_t end = jpeg_first_image_end(data, size);
  if (end == 0) {
    throw jpeg_corrupt("malformed marker structure: no end-of-image marker reached from the start");
  }
  if (end != size) {
    throw jpeg_corrupt(std::to_string(size - end) +
                       " bytes after the end-of-image marker (a second image or trailing data)");
  }
}

void check_jpeg_shape(uint32_t height, uint32_t width, uint32_t channels) {
  if (height == 0 || width == 0 || height > kJpegMaxSide || width > kJpegMaxSide) {
    throw jpeg_invalid("image size " + std::to_string(height) + "x" + std::to_string(width) +
                       " is outside 1.." + std::to_string(kJpegMaxSide));
  }
  if (channels != 1 && channels != 3) {
    throw jpeg_invalid("channels must be 1 or 3, not " + std::to_string(channels));
  }
}

}  // namespace detail
}  // namespace dscache
