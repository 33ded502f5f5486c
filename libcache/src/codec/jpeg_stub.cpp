// The JPEG codec of a libcache built without libjpeg (meson feature jpeg disabled or libjpeg
// missing): every entry point throws Error(kUnsupported), so a JPEG cache is refused with a
// reason instead of failing to link. Compiled instead of jpeg.cpp (libcache/meson.build).
#include <vector>

#include "codec/jpeg_internal.h"
#include "dscache/error.h"
#include "dscache/jpeg.h"

namespace dscache {

namespace {

[[noreturn]] void unsupported() {
  throw Error(ErrorKind::kUnsupported, "",
              "this build of libcache has no JPEG support (meson feature jpeg)");
}

}  // namespace

struct JpegScratch::Impl {};

bool jpeg_supported() { return false; }
JpegScratch::JpegScratch() : impl_(nullptr) {}
JpegScratch::~JpegScratch() = default;
JpegInfo jpeg_info(const uint8_t*, size_t) { unsupported(); }
void jpeg_encode(const uint8_t*, uint32_t, uint32_t, uint32_t, int, std::vector<uint8_t>*) {
  unsupported();
}
void jpeg_encode(const uint8_t*, uint32_t, uint32_t, uint32_t, const JpegEncodeOptions&,
                 std::vector<uint8_t>*) {
  unsupported();
}
void jpeg_decode(const uint8_t*, size_t, uint32_t, uint32_t, uint32_t, uint8_t*, JpegScratch*) {
  unsupported();
}
void jpeg_decode_scaled(const uint8_t*, size_t, uint32_t, uint32_t, uint32_t, uint32_t, uint8_t*,
                        JpegScratch*) {
  unsupported();
}
void jpeg_decode_crop(const uint8_t*, size_t, uint32_t, uint32_t, uint32_t, const CropBox&,
                      uint32_t, uint32_t, uint8_t*, JpegScratch*, const JpegDecodeOptions&) {
  unsupported();
}
void detail::jpeg_encode_layout(const uint8_t*, uint32_t, uint32_t, uint32_t, const JpegLayout&,
                                std::vector<uint8_t>*) {
  unsupported();
}
detail::JpegDecodeStats detail::last_decode_stats(const JpegScratch&) { return {}; }

}  // namespace dscache
