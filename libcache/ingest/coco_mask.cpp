// COCO masks: decoding RLE strings, rasterising polygons and RLE into semantic masks by
// pycocotools' rule, and decoding mask images (grey or palette) to class ids.
#include "dscache/ingest/coco.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <string>
#include <utility>
#include <vector>

#ifdef DSCACHE_HAVE_LIBPNG
#include <png.h>
#endif

#include "dscache/error.h"

namespace dscache {
namespace {

// pycocotools' polygon upsampling factor (maskApi.c rleFrPoly: `scale = 5`).
constexpr int64_t kPolyScale = 5;

// Decodes pycocotools' rleToString text: each count (after the first three, its difference from
// the count two before) as 5-bit groups, least significant first, each char = group + 48 with
// 0x20 set when another group follows; the last group's 0x10 bit is the sign.
bool decode_rle(const std::string& text, std::vector<uint32_t>* counts, std::string* reason) {
  counts->clear();
  size_t p = 0;
  while (p < text.size()) {
    int64_t x = 0;
    int k = 0;
    bool more = true;
    while (more) {
      if (p >= text.size()) {
        *reason = "RLE string ends inside count " + std::to_string(counts->size());
        return false;
      }
      const int c = static_cast<unsigned char>(text[p]) - 48;
      if (c < 0 || c > 63) {
        *reason = "byte " + std::to_string(p) + " of the RLE string is not an RLE character";
        return false;
      }
      if (k == 7) {  // 35 bits hold any count or difference of counts below 2^32
        *reason = "RLE count " + std::to_string(counts->size()) + " is longer than 7 characters";
        return false;
      }
      x |= int64_t{c & 0x1f} << (5 * k);
      more = (c & 0x20) != 0;
      ++p;
      ++k;
      if (!more && (c & 0x10)) x -= int64_t{1} << (5 * k);  // sign extension of the k groups
    }
    const size_t m = counts->size();
    if (m > 2) x += (*counts)[m - 2];
    if (x < 0 || x > int64_t{UINT32_MAX}) {
      *reason = "RLE count " + std::to_string(m) + " is " + std::to_string(x);
      return false;
    }
    counts->push_back(static_cast<uint32_t>(x));
  }
  return true;
}

// Paints the column-major pixel range [begin, end) of an h x w image with `value`.
void paint_columns(uint64_t begin, uint64_t end, uint32_t h, uint32_t w, uint8_t value,
                   uint8_t* out) {
  end = std::min<uint64_t>(end, uint64_t{h} * w);
  for (uint64_t p = begin; p < end;) {
    const uint64_t x = p / h, y0 = p % h;
    const uint64_t y1 = std::min<uint64_t>(h, y0 + (end - p));
    for (uint64_t y = y0; y < y1; ++y) out[y * w + x] = value;
    p += y1 - y0;
  }
}

// The column-major positions where polygon `xy` switches between outside and inside, by
// pycocotools' rule (maskApi.c rleFrPoly), so that masks equal annToMask's:
//  1. vertices are rounded to a grid 5x finer (trunc(5 * v + 0.5)) and each edge is traced as a
//     digital line on it, one point per step along its longer axis (rounded the same way);
//  2. wherever the trace steps from fine column u to u +- 1 with min(u, u+-1) = 5x + 2 -- i.e.
//     it crosses the vertical line through pixel column x's centre, x + 0.5 -- for 0 <= x < w,
//     a switch happens at row y = ceil((min(v) + 0.5) / 5 - 0.5), clamped to [0, h];
//  3. sorted, switches pair up: pixels from each odd switch to the next even one are inside.
// So a pixel is inside when its centre is inside the polygon (even-odd rule), up to the 1/5-pixel
// rounding of the trace: pixels whose centres lie within ~0.2 pixel of an edge may go either way
// (a centre exactly on an edge: outside on a left or top edge, inside on a right or bottom one,
// as vertices round half up). Compared bit for bit with a transcription of maskApi.c's
// rleFrPoly on 300 random polygons (once, by hand; the tests use OpenCV's fillPoly).
std::vector<uint64_t> polygon_switches(const std::vector<double>& xy, uint32_t h, uint32_t w) {
  const size_t n = xy.size() / 2;
  std::vector<uint64_t> out;
  if (n == 0) return out;
  std::vector<int64_t> gx(n + 1), gy(n + 1);
  for (size_t j = 0; j < n; ++j) {
    gx[j] = static_cast<int64_t>(kPolyScale * xy[2 * j] + .5);  // truncation, as in C
    gy[j] = static_cast<int64_t>(kPolyScale * xy[2 * j + 1] + .5);
  }
  gx[n] = gx[0];
  gy[n] = gy[0];
  std::vector<std::pair<int64_t, int64_t>> trace;
  for (size_t j = 0; j < n; ++j) {
    int64_t xs = gx[j], xe = gx[j + 1], ys = gy[j], ye = gy[j + 1];
    const int64_t dx = std::llabs(xe - xs), dy = std::llabs(ye - ys);
    const bool flip = (dx >= dy && xs > xe) || (dx < dy && ys > ye);
    if (flip) {
      std::swap(xs, xe);
      std::swap(ys, ye);
    }
    if (dx == 0 && dy == 0) {
      trace.emplace_back(xs, ys);
      continue;
    }
    const double s =
        dx >= dy ? static_cast<double>(ye - ys) / dx : static_cast<double>(xe - xs) / dy;
    const int64_t steps = std::max(dx, dy);
    for (int64_t d = 0; d <= steps; ++d) {
      const int64_t t = flip ? steps - d : d;
      if (dx >= dy) {
        trace.emplace_back(t + xs, static_cast<int64_t>(ys + s * t + .5));
      } else {
        trace.emplace_back(static_cast<int64_t>(xs + s * t + .5), t + ys);
      }
    }
  }
  for (size_t j = 1; j < trace.size(); ++j) {
    const int64_t u0 = trace[j - 1].first, u1 = trace[j].first;
    if (u0 == u1) continue;
    const int64_t xd = std::min(u0, u1);
    if (xd < 2 || (xd - 2) % kPolyScale != 0) continue;
    const int64_t x = (xd - 2) / kPolyScale;
    if (x > static_cast<int64_t>(w) - 1) continue;
    double yd =
        (static_cast<double>(std::min(trace[j - 1].second, trace[j].second)) + .5) / kPolyScale -
        .5;
    yd = std::ceil(std::min<double>(std::max(yd, 0.0), h));
    out.push_back(static_cast<uint64_t>(x) * h + static_cast<uint64_t>(yd));
  }
  std::sort(out.begin(), out.end());
  return out;
}

#ifdef DSCACHE_HAVE_LIBPNG
struct PngSource {
  const uint8_t* data;
  size_t size;
  size_t pos;
};

void png_read_memory(png_structp png, png_bytep out, png_size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > src->size - src->pos) png_error(png, "file ends early");
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
}

void png_fail(png_structp png, png_const_charp msg) {
  *static_cast<std::string*>(png_get_error_ptr(png)) = std::string("cannot decode: ") + msg;
  png_longjmp(png, 1);
}

void png_ignore_warning(png_structp, png_const_charp) {}

// A palette PNG's indices, or a grey PNG's values below 8 bits, one byte per pixel (1-, 2- and
// 4-bit values unpacked, not scaled), through libpng: OpenCV would expand a palette to colours
// and scale 1-bit grey to 0/255. No C++ object with a destructor lives in
// this frame across setjmp.
bool decode_packed_png(const uint8_t* data, size_t size, std::vector<uint8_t>* out,
                       uint32_t* height, uint32_t* width, std::string* reason) {
  PngSource src{data, size, 0};
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, reason, png_fail, png_ignore_warning);
  if (png == nullptr) {
    *reason = "cannot decode: libpng could not start";
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
    return false;
  }
  png_set_read_fn(png, &src, png_read_memory);
  png_set_user_limits(png, 1 << 16, 1 << 16);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if (uint64_t{w} * h > (uint64_t{1} << 30)) png_error(png, "more than 2^30 pixels");
  png_set_packing(png);
  const int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != w) png_error(png, "unexpected row size");
  out->assign(uint64_t{w} * h, 0);
  for (int pass = 0; pass < passes; ++pass) {
    for (png_uint_32 y = 0; y < h; ++y) png_read_row(png, out->data() + uint64_t{y} * w, nullptr);
  }
  png_destroy_read_struct(&png, &info, nullptr);
  *height = h;
  *width = w;
  return true;
}
#endif

// PNG colour type from the IHDR chunk (which must come first), or -1 for anything else; its bit
// depth in *bits.
int png_color_type(const uint8_t* data, size_t size, int* bits) {
  static const uint8_t kSig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (size < 26 || std::memcmp(data, kSig, 8) != 0 || std::memcmp(data + 12, "IHDR", 4) != 0) {
    return -1;
  }
  *bits = data[24];
  return data[25];
}

}  // namespace

std::vector<uint32_t> decode_rle_string(const std::string& text, const std::string& where) {
  std::vector<uint32_t> counts;
  std::string reason;
  if (!decode_rle(text, &counts, &reason)) throw Error(ErrorKind::kCorruption, where, reason);
  return counts;
}

void rasterize_semantic(const CocoInstances& coco, size_t k, uint8_t* out) {
  const CocoImage& img = coco.images.at(k);
  const uint32_t h = img.height, w = img.width;
  std::memset(out, 0, uint64_t{h} * w);
  for (const CocoAnnotation& a : img.annotations) {
    if (a.category + 1 > 255) {
      throw Error(ErrorKind::kUnsupported, coco.path,
                  "category index " + std::to_string(a.category) + " does not fit a uint8 mask");
    }
  }
  const std::vector<CocoSegmentation> segs = read_segmentations(coco, k);
  for (size_t i = 0; i < segs.size(); ++i) {
    const uint8_t value = static_cast<uint8_t>(img.annotations[i].category + 1);
    const CocoSegmentation& s = segs[i];
    if (s.is_rle()) {
      if (s.rle_height != h || s.rle_width != w) continue;  // the parser made such images bad
      uint64_t p = 0;
      for (size_t j = 0; j < s.rle_counts.size(); ++j) {
        if (j % 2 == 1) paint_columns(p, p + s.rle_counts[j], h, w, value, out);
        p += s.rle_counts[j];
      }
      continue;
    }
    // Each polygon on its own, painted with the annotation's class: their union, as annToMask
    // merges an annotation's polygons.
    for (const auto& poly : s.polygons) {
      const std::vector<uint64_t> sw = polygon_switches(poly, h, w);
      for (size_t j = 0; j < sw.size(); j += 2) {
        paint_columns(sw[j], j + 1 < sw.size() ? sw[j + 1] : uint64_t{h} * w, h, w, value, out);
      }
    }
  }
}

bool decode_mask(const uint8_t* data, size_t size, std::vector<uint8_t>* out, uint32_t* height,
                 uint32_t* width, uint32_t* element_bytes, std::string* reason) {
  int bits = 0;
  const int png_type = png_color_type(data, size, &bits);
  if (png_type == 3 || (png_type == 0 && bits < 8)) {
#ifdef DSCACHE_HAVE_LIBPNG
    *element_bytes = 1;
    return decode_packed_png(data, size, out, height, width, reason);
#else
    *reason = png_type == 3 ? "mask is a palette PNG: this build has no libpng to read its indices"
                            : "mask is a grey PNG of " + std::to_string(bits) +
                                  " bits: this build has no libpng to read its values unscaled";
    return false;
#endif
  }
  if (png_type == 2 || png_type == 4 || png_type == 6) {
    *reason = png_type == 2   ? "mask is RGB (3 channels): expected one channel of class ids"
              : png_type == 4 ? "mask is grey+alpha (2 channels): expected one channel of class ids"
                              : "mask is RGBA (4 channels): expected one channel of class ids";
    return false;
  }
  cv::Mat m;
  try {
    m = cv::imdecode(cv::Mat(1, static_cast<int>(std::min<size_t>(size, INT32_MAX)), CV_8UC1,
                             const_cast<uint8_t*>(data)),
                     cv::IMREAD_UNCHANGED);
  } catch (const cv::Exception&) {
    m.release();
  }
  if (m.empty()) {
    *reason = "cannot decode";
    return false;
  }
  if (m.channels() != 1) {
    *reason = std::string("mask is ") +
              (m.channels() == 3   ? "RGB "
               : m.channels() == 4 ? "RGBA "
                                   : "") +
              "(" + std::to_string(m.channels()) + " channels): expected one channel of class ids";
    return false;
  }
  if (m.depth() != CV_8U && m.depth() != CV_16U) {
    *reason = "mask elements are not 8- or 16-bit unsigned integers";
    return false;
  }
  *element_bytes = m.depth() == CV_8U ? 1 : 2;
  *height = static_cast<uint32_t>(m.rows);
  *width = static_cast<uint32_t>(m.cols);
  const size_t row = static_cast<size_t>(m.cols) * *element_bytes;
  out->resize(row * m.rows);
  for (int y = 0; y < m.rows; ++y) std::memcpy(out->data() + row * y, m.ptr(y), row);
  return true;
}

}  // namespace dscache
