// Image decoding for `dscache build`, `verify --source` and the lazy cache: bytes in, HWC uint8
// out.
//
// Everything works on bytes already in memory (never on paths) and depends only on its
// arguments: the same bytes and options give the same output bytes on every call, from any
// thread. All functions are thread-safe and change no global state, except set_decode_threads
// (OpenCV's own thread count, which only the caller can choose). No OpenCV types appear here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dscache/manifest.h"

namespace dscache {

// Container formats recognized from their magic bytes (never from the file name).
enum class ImageFormat {
  kUnknown,
  kJpeg,
  kPng,
  kGif,
  kBmp,
  kTiff,
  kWebp,
  kPnm,  // PBM/PGM/PPM (P1-P6) and PAM (P7)
  kJpeg2000,
  kHdr,  // Radiance RGBE
  kSunRaster,
  kOpenExr,
};

// "unknown", "jpeg", "png", "gif", "bmp", "tiff", "webp", "pnm", "jpeg2000", "hdr",
// "sunraster", "openexr".
const char* to_string(ImageFormat f);

// The format announced by the first bytes of `data`; kUnknown when none matches. Reads at most
// `size` bytes; `data` may be null when `size` is 0.
ImageFormat sniff_format(const uint8_t* data, size_t size);

// What a file's header says, read without decoding any pixels.
struct ImageHeaderInfo {
  ImageFormat format = ImageFormat::kUnknown;  // from sniff_format
  uint32_t width = 0;                          // columns as stored (before EXIF orientation)
  uint32_t height = 0;                         // rows as stored (before EXIF orientation)
  bool dims_known = false;  // width/height were parsed (jpeg, png, gif, bmp, webp, pnm, tiff,
                            // jpeg2000, sunraster); false for other formats or a short header
};

// Parses the header's dimensions. Never throws and never reads past `size`; a truncated or
// malformed header yields dims_known = false (the format may still be known).
ImageHeaderInfo read_image_header(const uint8_t* data, size_t size);

// What decode_image and resize_pixels produce. Validated on every call.
struct DecodeOptions {
  uint32_t height = 0;    // output rows; required, > 0
  uint32_t width = 0;     // output columns; required, > 0
  uint32_t channels = 3;  // 3 = RGB, 1 = grey, 4 = RGBA (alpha kKeep only); default 3
  ResizePolicy resize = ResizePolicy::kCrop;  // stretch, center-crop (default) or pad (black)
  bool reduced_decode = true;  // JPEG only: decode at 1/2, 1/4 or 1/8 scale (libjpeg DCT
                               // scaling) when that still leaves at least the pixels the resize
                               // needs; default true
  uint64_t max_pixels = 100'000'000;  // skip images whose width*height exceeds this, checked on
                                      // the header before decoding; 0 = no limit; default 1e8
  // Keep the pixels as stored, ignoring an EXIF orientation tag (default false: applied, as
  // OpenCV's imread does). A sample with masks or boxes sets it: annotations (COCO's, a mask
  // file's) are drawn on the stored pixel grid.
  bool ignore_orientation = false;
  // Decode JPEG sources with OpenCV's imdecode even where libcache's own libjpeg-turbo decoder
  // gives the same pixels (docs/BUILD.md "JPEG sources"); that one is the default, being
  // faster (OpenCV 4.6 swaps every row to BGR in a scalar loop). For comparison and as an
  // escape hatch; default false.
  bool opencv_jpeg = false;
  // What a source's alpha becomes (PNG: RGBA, grey+alpha, palette or RGB with tRNS; WebP):
  // kDrop (default): the colour stored under it, as OpenCV's imread and PIL's convert('RGB')
  // give; kComposite: blended onto `background` at the source's resolution, before the resize,
  // out = (c * a + bg * (255 - a) + 127) / 255 per channel (8-bit; 16-bit sources are first
  // reduced to 8 bits as drop reduces them, v >> 8); kKeep: a fourth channel (channels 4, RGBA,
  // straight alpha resized like the colour; 255 for a source without alpha).
  AlphaMode alpha = AlphaMode::kDrop;
  uint8_t background[3] = {255, 255, 255};  // kComposite: R, G, B; default white
};

// The outcome of decoding one image. A bad image is ok = false with a reason, never a throw.
struct DecodeResult {
  bool ok = false;     // true when `out` holds the image
  std::string reason;  // why not, for the skip report: "zero-byte file", "corrupt or truncated
                       // jpeg: OpenCV could not decode it", ...; empty when ok
  ImageFormat format = ImageFormat::kUnknown;  // sniffed from the bytes
  uint32_t source_width = 0;    // source columns as stored (header, else decoded); 0 if unknown
  uint32_t source_height = 0;   // source rows as stored (header, else decoded); 0 if unknown
  int reduction = 1;            // JPEG DCT scaling factor used: 1 (full decode), 2, 4 or 8
  uint32_t decoded_width = 0;   // the decoded image before the resize (the source at
  uint32_t decoded_height = 0;  // 1/reduction, rounded up; oriented); 0 if not decoded
  // The source has an alpha channel with at least one pixel below its maximum (255, or 65535
  // for 16-bit), whatever opt.alpha did with it. Seen for PNG and WebP (not for a grey PNG's
  // tRNS colour, which OpenCV does not expand).
  bool transparent = false;
  // A JPEG decoded by libcache's libjpeg-turbo decoder rather than OpenCV's imdecode (the same
  // pixels: DecodeOptions::opencv_jpeg).
  bool libjpeg_direct = false;
};

// Where a source's pixels land in the sample decode_image (or decode_image_ragged) made of it:
// a sample coordinate (pixel edges) is source * scale + offset, per axis. What masks and boxes
// are mapped with, so they move exactly as the pixels did (resize, crop, pad, DCT reduction).
struct SampleGeometry {
  double scale_x = 1, scale_y = 1;    // sample pixels per source pixel
  double offset_x = 0, offset_y = 0;  // the sample coordinate of the source's edge 0
  uint32_t width = 0, height = 0;     // the sample's size
  // The source pixels the sample's image covers from edge 0 (the source's size, or more under
  // DCT reduction, whose last decoded pixel may reach past the source's edge).
  double extent_x = 0, extent_y = 0;
  uint32_t source_width = 0, source_height = 0;  // the source's size (what annotations are on)
};

// The geometry of a fixed-layout decode (opt's size and policy) of an image decoded at
// decoded_w x decoded_h with DCT `reduction` (DecodeResult's), or of resize_pixels (reduction 1).
SampleGeometry fixed_geometry(uint32_t decoded_w, uint32_t decoded_h, int reduction,
                              const DecodeOptions& opt);
// The geometry of a ragged decode: the decoded image resized to out_w x out_h.
SampleGeometry ragged_geometry(uint32_t decoded_w, uint32_t decoded_h, int reduction,
                               uint32_t out_w, uint32_t out_h);

// A mask (src_h x src_w elements of element_bytes 1 or 2, one channel) resampled into the
// sample: each output pixel takes the source pixel under its centre mapped back through `g`
// (nearest neighbour, class ids never blended); a centre outside the source (a pad border)
// takes `fill`. Writes g.height * g.width elements to `out`.
void map_mask(const uint8_t* src, uint32_t src_h, uint32_t src_w, uint32_t element_bytes,
              const SampleGeometry& g, uint32_t fill, uint8_t* out);
// Boxes (n rows of float32 x1 y1 x2 y2, source pixel edges) mapped through `g`, clipped to the
// sample; a box with no area left is dropped. Writes the kept rows to `out` (room for n) and
// their input row numbers to *kept; returns how many were kept.
size_t map_boxes(const float* in, size_t n, const SampleGeometry& g, float* out,
                 std::vector<uint32_t>* kept);

// Decodes `size` bytes of an image file and writes opt.height * opt.width * opt.channels bytes,
// HWC, RGB, grey or RGBA, to `out` (caller-owned; untouched unless ok, except that it may be
// partly written when ok is false). Orientation, palettes, grey, 16-bit (reduced to 8-bit) and
// CMYK are handled as OpenCV's imdecode does; alpha as opt.alpha says. Never throws for bad image
// data; throws Error(kInvalidArgument) for invalid options.
DecodeResult decode_image(const uint8_t* data, size_t size, const DecodeOptions& opt, uint8_t* out);

// Ragged layout: the output size for a src_h x src_w image: unchanged when its shorter side is
// at most max_side, otherwise scaled (aspect kept, rounded) so the shorter side is max_side.
void ragged_size(uint32_t src_h, uint32_t src_w, uint32_t max_side, uint32_t* out_h,
                 uint32_t* out_w);

// Ragged layout: decodes like decode_image (opt.height/width/resize are ignored) but keeps the
// aspect ratio, shrinking with INTER_AREA so the shorter side is at most max_side (never
// enlarging). *out is resized to out_h*out_w*opt.channels bytes, HWC. JPEGs are decoded at
// reduced scale when the shorter side stays >= max_side.
DecodeResult decode_image_ragged(const uint8_t* data, size_t size, const DecodeOptions& opt,
                                 uint32_t max_side, std::vector<uint8_t>* out, uint32_t* out_h,
                                 uint32_t* out_w);

// Ragged layout for already-decoded pixels (idx sources): converts channels, then shrinks as
// decode_image_ragged does.
void resize_pixels_ragged(const uint8_t* src, uint32_t src_h, uint32_t src_w, uint32_t channels,
                          uint32_t out_channels, uint32_t max_side, std::vector<uint8_t>* out,
                          uint32_t* out_h, uint32_t* out_w);

// Applies opt's resize policy and channel count to pixels already decoded (e.g. MNIST idx):
// `src` is src_h * src_w * channels bytes, HWC, RGB or grey (channels 3 or 1). Grey is
// replicated to RGB when opt.channels is 3 (RGBA, alpha 255, when 4); RGB becomes grey (OpenCV
// COLOR_RGB2GRAY) before resizing when opt.channels is 1. Writes opt.height * opt.width *
// opt.channels bytes to `out`. Throws Error(kInvalidArgument) for invalid options or source shape.
void resize_pixels(const uint8_t* src, uint32_t src_h, uint32_t src_w, uint32_t channels,
                   const DecodeOptions& opt, uint8_t* out);

// How many threads the image library (OpenCV) may use inside one decode or resize: 0 = none but
// the calling thread, which is what a caller that runs its own decode threads wants (OpenCV's
// pool on top of them would oversubscribe the cores); < 0 = the library's default (all cores).
// Process-wide, as OpenCV keeps one setting: call it before decoding starts, not while other
// threads decode.
void set_decode_threads(int threads);

}  // namespace dscache
