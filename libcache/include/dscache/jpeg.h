// JPEG encoding and serve-time decoding (libjpeg-turbo) for caches built with --codec jpeg.
// Decoding can stop at what a crop needs: DCT-domain scaling plus skipped rows and columns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dscache/transform.h"

namespace dscache {

// True when this build of libcache has JPEG support (meson feature `jpeg`). Without it every
// function below throws Error(kUnsupported) (a JpegScratch can still be made).
bool jpeg_supported();

// What a JPEG stream's header says.
struct JpegInfo {
  uint32_t height = 0;
  uint32_t width = 0;
  uint32_t channels = 0;  // components in the stream: 1 (grey) or 3 (YCbCr)
};

// Reads only the header (and checks that the stream ends with EOI, FF D9). Throws
// Error(kCorruption, "", reason) for bytes that are not a JPEG libjpeg accepts, or that have
// other than 1 or 3 components.
JpegInfo jpeg_info(const uint8_t* data, size_t size);

// Encodes an HWC uint8 image (channels 1 or 3, RGB) as a baseline JPEG: quality 1..100,
// 4:2:0 chroma subsampling for 3 channels, no metadata, restart markers at the interval that
// lets jpeg_decode_crop skip what a crop does not need (docs/FORMAT.md "Serve-time decode").
// The same input and quality give the same bytes on every run. Replaces *out. Throws
// Error(kInvalidArgument) for bad arguments.
void jpeg_encode(const uint8_t* pixels, uint32_t height, uint32_t width, uint32_t channels,
                 int quality, std::vector<uint8_t>* out);

struct JpegEncodeOptions {
  int quality = 90;             // 1..100; default 90
  bool restart_markers = true;  // default true; false: none, as dscache wrote streams before
                                // 2026-12 (`dscache verify --source` re-encodes those so)
};
void jpeg_encode(const uint8_t* pixels, uint32_t height, uint32_t width, uint32_t channels,
                 const JpegEncodeOptions& options, std::vector<uint8_t>* out);

// How jpeg_decode_crop may save work (both on by default; off = the reference path).
struct JpegDecodeOptions {
  bool scale = true;  // DCT-domain scaling (scale_num/8) when the output is at most half the crop
                      // on both axes: the smallest M/8 keeping the scaled crop >= the output
  bool crop = true;   // jpeg_crop_scanline / jpeg_skip_scanlines around the crop box
};

// Reused between calls by one thread (holds the decoder and its buffers); not thread-safe.
class JpegScratch {
 public:
  JpegScratch();
  ~JpegScratch();
  JpegScratch(const JpegScratch&) = delete;
  JpegScratch& operator=(const JpegScratch&) = delete;
  struct Impl;
  Impl* impl() const { return impl_; }

 private:
  Impl* impl_;
};

// Decodes the whole image into height*width*channels bytes at `out` (RGB or grey, converted
// from the stream's components as needed). The stream's size must equal height x width: a
// mismatch, a truncated stream (the last two bytes must be EOI, FF D9) or corrupt data (libjpeg
// warnings included) is Error(kCorruption, "", reason); never a crash, never a partly grey image
// returned as good. Bad arguments (channels not 1 or 3, a null scratch) are kInvalidArgument.
void jpeg_decode(const uint8_t* data, size_t size, uint32_t height, uint32_t width,
                 uint32_t channels, uint8_t* out, JpegScratch* scratch);

// jpeg_decode at 1/denom of the size (denom 1, 2, 4 or 8): libjpeg's DCT scaling, what
// OpenCV's IMREAD_REDUCED_*_<denom> decodes, into jpeg_scaled_side(height, denom) x
// jpeg_scaled_side(width, denom) x channels bytes at `out`. denom 1 is jpeg_decode. Same errors;
// another denom is kInvalidArgument.
void jpeg_decode_scaled(const uint8_t* data, size_t size, uint32_t height, uint32_t width,
                        uint32_t channels, uint32_t denom, uint8_t* out, JpegScratch* scratch);
inline uint32_t jpeg_scaled_side(uint32_t side, uint32_t denom) {
  return static_cast<uint32_t>((uint64_t{side} + denom - 1) / denom);
}

// Decodes `box` (in full-image pixels of the height x width stream, as choose_crop gives it)
// resized to out_h x out_w x channels at `out`, mirrored when box.flip. Equals jpeg_decode
// followed by crop_resize(box, out_h, out_w) within the tolerance in docs/FORMAT.md
// ("Serve-time decode"); with options {false, false}, or whenever no DCT scaling applies, it is
// exactly that. Only the rows and columns around the box are decoded. Errors as jpeg_decode; a
// box outside the image or an empty box/output is kInvalidArgument.
void jpeg_decode_crop(const uint8_t* data, size_t size, uint32_t height, uint32_t width,
                      uint32_t channels, const CropBox& box, uint32_t out_h, uint32_t out_w,
                      uint8_t* out, JpegScratch* scratch, const JpegDecodeOptions& options = {});

}  // namespace dscache
