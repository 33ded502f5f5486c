// stream_png: libpng row by row, the transforms OpenCV 4.6's PNG decoder sets (grfmt_png.cpp,
// so the rows hold the values imdecode would put in its Mat), alpha handled as image_decode.cpp
// handles a whole image, and each row pushed into an AreaResizer.
#include "png_stream.h"

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "area_stream.h"

#ifdef DSCACHE_HAVE_LIBPNG
#include <png.h>
#endif

namespace dscache {

#ifndef DSCACHE_HAVE_LIBPNG

PngStreamStatus stream_png(const uint8_t*, size_t, const PngStreamRequest&, uint8_t*, bool*,
                           std::string*) {
  return PngStreamStatus::kNotApplicable;
}

#else

namespace {

// Everything the libpng callbacks and the setjmp frame share. Plain data: libpng's errors
// longjmp out of its calls, so nothing with a destructor may live in the frames they leave.
struct Reader {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  char error[200] = {0};
  bool not_applicable = false;
  uint8_t* row = nullptr;  // malloc'd after the header is read; freed by the caller
  // Filled from the header, for the row converter.
  uint32_t width = 0, height = 0;
  int row_channels = 0;  // after the transforms: 1, 2 (grey+alpha), 3 or 4
  bool sixteen = false;  // samples are 16-bit big-endian (kept for the alpha's full depth)
};

void on_read(png_structp png, png_bytep out, size_t n) {
  auto* r = static_cast<Reader*>(png_get_io_ptr(png));
  if (n > r->size - r->pos) png_error(png, "PNG input buffer is incomplete");
  std::memcpy(out, r->data + r->pos, n);
  r->pos += n;
}

void on_error(png_structp png, png_const_charp msg) {
  auto* r = static_cast<Reader*>(png_get_error_ptr(png));
  std::snprintf(r->error, sizeof r->error, "%s", msg);
  png_longjmp(png, 1);
}

// Receives each decoded row (C++ side; never calls libpng, so never longjmp'd over).
using RowSink = void (*)(void* ctx, const uint8_t* row);

// Reads the header, sets the transforms, then every row into `sink`, then the end (as imdecode
// does: a file cut after its image data still fails). False on a libpng error or when
// r->not_applicable was set.
bool read_png(png_structp png, png_infop info, png_infop end, Reader* r,
              const PngStreamRequest* req, RowSink sink, void* ctx) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, r, on_read);
  png_read_info(png, info);
  png_uint_32 w = 0, h = 0;
  int depth = 0, color_type = 0, interlace = 0;
  png_get_IHDR(png, info, &w, &h, &depth, &color_type, &interlace, nullptr, nullptr);
  if (interlace != PNG_INTERLACE_NONE) {  // Adam7 passes do not arrive in row order
    r->not_applicable = true;
    return false;
  }
  r->width = w;
  r->height = h;
  const bool color = req->channels != 1;
  // OpenCV's readData: 16-bit to 8 by the high byte, except where the alpha must be seen at
  // its own depth first (the high byte is then taken here, the same bytes).
  r->sixteen = depth == 16 && req->has_alpha;
  if (depth == 16 && !req->has_alpha) png_set_strip_16(png);
  if (req->has_alpha) {
    png_set_tRNS_to_alpha(png);
  } else {
    png_set_strip_alpha(png);
  }
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if ((color_type & PNG_COLOR_MASK_COLOR) == 0 && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if ((color_type & PNG_COLOR_MASK_COLOR) && color) {
    png_set_bgr(png);
  } else if (color) {
    png_set_gray_to_rgb(png);
  } else {
    png_set_rgb_to_gray(png, 1, 0.299, 0.587);  // OpenCV's IMREAD_GRAYSCALE weights
  }
  png_read_update_info(png, info);
  r->row_channels = png_get_channels(png, info);
  const size_t row_bytes = png_get_rowbytes(png, info);
  const int want = (color ? 3 : 1) + (req->has_alpha ? 1 : 0);
  if (r->row_channels != want || row_bytes != size_t{w} * want * (r->sixteen ? 2 : 1)) {
    r->not_applicable = true;
    return false;
  }
  r->row = static_cast<uint8_t*>(std::malloc(row_bytes));
  if (r->row == nullptr) png_error(png, "out of memory for one row");
  for (png_uint_32 y = 0; y < h; ++y) {
    png_read_row(png, r->row, nullptr);
    sink(ctx, r->row);
  }
  png_read_end(png, end);
  return true;
}

// Turns libpng's rows into the resizer's (8-bit, req.channels) and tracks the alpha.
struct Converter {
  const Reader* reader;
  const PngStreamRequest* req;
  AreaResizer* resizer;
  std::vector<uint8_t> out;
  bool transparent = false;

  static void sink(void* self, const uint8_t* row) { static_cast<Converter*>(self)->take(row); }

  void take(const uint8_t* row) {
    const int in_cn = reader->row_channels;
    const int out_cn = req->channels;
    const size_t w = reader->width;
    const int step = reader->sixteen ? 2 : 1;  // the high byte comes first (big-endian)
    if (!req->has_alpha) {                     // already what the resizer wants
      if (!reader->sixteen) return resizer->push_row(row);
      for (size_t i = 0; i < w * in_cn; ++i) out[i] = row[i * 2];
      return resizer->push_row(out.data());
    }
    const int colors = in_cn - 1;
    const size_t pixel = size_t(in_cn) * step;
    if (!transparent) {  // one look per row until a pixel is seen below the maximum
      const uint8_t* ap = row + colors * step;
      for (size_t x = 0; x < w && !transparent; ++x, ap += pixel) {
        transparent = ap[0] != 255 || (reader->sixteen && ap[1] != 255);
      }
    }
    uint8_t* o = out.data();
    if (req->alpha == AlphaMode::kComposite) {
      const uint32_t bg[3] = {req->background[2], req->background[1], req->background[0]};
      for (size_t x = 0; x < w; ++x, o += out_cn) {
        const uint8_t* p = row + x * pixel;
        const uint32_t a = p[colors * step];
        for (int c = 0; c < colors; ++c) {
          o[c] = static_cast<uint8_t>((p[c * step] * a + bg[c] * (255 - a) + 127) / 255);
        }
      }
    } else if (out_cn == 4 || step == 2) {  // keep (all four), or 16-bit drop (high bytes)
      for (size_t x = 0; x < w; ++x, o += out_cn) {
        const uint8_t* p = row + x * pixel;
        for (int c = 0; c < out_cn; ++c) o[c] = p[c * step];
      }
    } else if (colors == 3) {  // 8-bit BGRA, drop: the common case
      for (size_t x = 0; x < w; ++x, o += 3) {
        const uint8_t* p = row + x * 4;
        o[0] = p[0], o[1] = p[1], o[2] = p[2];
      }
    } else {  // 8-bit grey+alpha, drop
      for (size_t x = 0; x < w; ++x) out[x] = row[x * 2];
    }
    resizer->push_row(out.data());
  }
};

}  // namespace

PngStreamStatus stream_png(const uint8_t* data, size_t size, const PngStreamRequest& req,
                           uint8_t* out, bool* transparent, std::string* error) {
  *transparent = false;
  const bool shape_ok = req.channels == 1 || req.channels == 3 || req.channels == 4;
  const bool alpha_ok = (req.channels == 4) == (req.alpha == AlphaMode::kKeep) &&
                        !(req.channels == 1 && req.has_alpha && req.alpha != AlphaMode::kDrop);
  if (!shape_ok || !alpha_ok || size < 33) return PngStreamStatus::kNotApplicable;
  // The header's size, read before libpng is set up: the resizer is made before the rows.
  const uint32_t w = (uint32_t{data[16]} << 24) | (uint32_t{data[17]} << 16) |
                     (uint32_t{data[18]} << 8) | data[19];
  const uint32_t h = (uint32_t{data[20]} << 24) | (uint32_t{data[21]} << 16) |
                     (uint32_t{data[22]} << 8) | data[23];
  if (!AreaResizer::applies(w, h, req.dst_w, req.dst_h)) return PngStreamStatus::kNotApplicable;
  if (req.channels == 4 && !req.has_alpha) return PngStreamStatus::kNotApplicable;

  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  if (png == nullptr) return PngStreamStatus::kNotApplicable;
  // Sizes libpng refuses (1e6 columns or rows by default) are not worth the tables a lying
  // header would make us allocate first: the whole-image path words the refusal.
  if (w > png_get_user_width_max(png) || h > png_get_user_height_max(png)) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return PngStreamStatus::kNotApplicable;
  }
  png_infop info = png_create_info_struct(png);
  png_infop end = png_create_info_struct(png);
  Reader r;
  r.data = data;
  r.size = size;
  png_set_error_fn(png, &r, on_error, nullptr);  // warnings: libpng's, on stderr as via OpenCV
  AreaResizer resizer(w, h, req.dst_w, req.dst_h, req.channels, out);
  Converter conv{&r, &req, &resizer, std::vector<uint8_t>(size_t{w} * 4), false};
  bool ok = false;
  if (info != nullptr && end != nullptr) {
    ok = read_png(png, info, end, &r, &req, Converter::sink, &conv);
  }
  std::free(r.row);
  png_destroy_read_struct(&png, &info, &end);
  if (r.not_applicable) return PngStreamStatus::kNotApplicable;
  if (!ok || r.width != w || r.height != h || !resizer.done()) {
    *error = r.error[0] ? r.error : "libpng stopped before the last row";
    return PngStreamStatus::kFailed;
  }
  *transparent = conv.transparent;
  if (req.channels == 4 && !conv.transparent) {  // as OpenCV's BGR2RGBA after the resize gives
    const size_t n = size_t{req.dst_w} * req.dst_h;
    for (size_t i = 0; i < n; ++i) out[i * 4 + 3] = 255;
  }
  return PngStreamStatus::kDone;
}

#endif  // DSCACHE_HAVE_LIBPNG

}  // namespace dscache
