// JPEG encode and serve-time decode with libjpeg-turbo's libjpeg API (jpeglib.h): the one file
// that includes libjpeg (feature jpeg; jpeg_stub.cpp stands in without it). The byte-level
// stream checks (jpeg_stream.cpp) and the crop geometry (jpeg_crop.cpp) need no libjpeg.
//
// libjpeg reports errors through error_exit, which must not return; we longjmp back to the
// frame that called setjmp. That frame (a *_guarded function below) holds only trivially
// destructible locals and calls libjpeg directly, so the jump skips no C++ destructor. Warnings
// (corrupt data, premature end of data, extraneous bytes) are promoted to errors: a damaged
// sample must never be served as a good image.
//
// TurboJPEG (turbojpeg.h) cannot crop, hence the libjpeg API.
#include "dscache/jpeg.h"

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "jpeg_internal.h"
#include "resample.h"

// clang-format off
#include <jpeglib.h>  // after <cstdio>: it uses FILE and size_t
#include <jerror.h>   // ERREXIT and the message codes
// clang-format on

namespace dscache {

namespace {

using detail::check_jpeg_shape;
using detail::check_jpeg_stream;
using detail::jpeg_corrupt;
using detail::jpeg_invalid;

static_assert(detail::kJpegMaxSide == JPEG_MAX_DIMENSION, "jpeg_internal.h's limit is libjpeg's");

// libjpeg's error manager plus where to jump and the formatted message.
struct ErrorMgr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void on_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorMgr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Level -1 is a warning (corrupt data, premature end, extraneous bytes): an error for us.
// Levels >= 0 are trace messages: ignored.
void on_emit_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level < 0) on_error_exit(cinfo);
}

void init_error_mgr(ErrorMgr* err) {
  jpeg_std_error(&err->pub);
  err->pub.error_exit = on_error_exit;
  err->pub.emit_message = on_emit_message;
  err->message[0] = '\0';
}

// ---------------------------------------------------------------------------------------------
// Encoding

// A growing malloc'd output buffer (plain C memory: freed by the caller on every path, so an
// error's longjmp cannot leak it).
struct MemDest {
  jpeg_destination_mgr pub;
  unsigned char* buffer;
  size_t capacity;
  size_t used;  // set by term_destination
};

void dest_init(j_compress_ptr) {}

boolean dest_empty(j_compress_ptr cinfo) {
  auto* d = reinterpret_cast<MemDest*>(cinfo->dest);
  const size_t grown = d->capacity * 2;
  auto* bigger = static_cast<unsigned char*>(std::realloc(d->buffer, grown));
  if (bigger == nullptr) ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 0);
  d->buffer = bigger;
  d->pub.next_output_byte = bigger + d->capacity;
  d->pub.free_in_buffer = grown - d->capacity;
  d->capacity = grown;
  return TRUE;
}

void dest_term(j_compress_ptr cinfo) {
  auto* d = reinterpret_cast<MemDest*>(cinfo->dest);
  d->used = d->capacity - d->pub.free_in_buffer;
}

struct EncodeJob {
  const uint8_t* pixels;
  uint32_t height, width, channels;
  detail::JpegLayout layout;
};

// Returns false (message in err->message) when libjpeg failed. Trivially destructible locals.
bool encode_guarded(const EncodeJob& job, jpeg_compress_struct* cinfo, ErrorMgr* err,
                    MemDest* dest) {
  cinfo->err = &err->pub;
  if (setjmp(err->jump)) return false;
  jpeg_create_compress(cinfo);
  cinfo->dest = &dest->pub;
  cinfo->image_width = job.width;
  cinfo->image_height = job.height;
  cinfo->input_components = static_cast<int>(job.channels);
  cinfo->in_color_space = job.channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(cinfo);
  jpeg_set_quality(cinfo, job.layout.quality, TRUE);
  if (job.channels == 3) {  // luma over 1x1 chroma: 2x2 is 4:2:0
    cinfo->comp_info[0].h_samp_factor = static_cast<int>(job.layout.luma_h);
    cinfo->comp_info[0].v_samp_factor = static_cast<int>(job.layout.luma_v);
    for (int c = 1; c < 3; ++c) {
      cinfo->comp_info[c].h_samp_factor = 1;
      cinfo->comp_info[c].v_samp_factor = 1;
    }
  }
  cinfo->dct_method = JDCT_ISLOW;
  cinfo->optimize_coding = TRUE;  // deterministic, and smaller
  if (job.layout.progressive) jpeg_simple_progression(cinfo);
  jpeg_start_compress(cinfo, TRUE);
  const size_t stride = size_t{job.width} * job.channels;
  while (cinfo->next_scanline < cinfo->image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(job.pixels + cinfo->next_scanline * stride);
    jpeg_write_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_compress(cinfo);
  return true;
}

// ---------------------------------------------------------------------------------------------
// Decoding

enum class Status { kOk, kFailed, kSizeMismatch, kBadComponents, kNeedsFull };

// What a guarded decode is asked to do. Plain data.
struct DecodeJob {
  const uint8_t* data;
  size_t size;
  uint32_t height, width, channels;  // expected stream size, output channels
  bool fast = false;                 // scale/crop path (else: every row at full size into out)
  uint8_t* out = nullptr;            // full path: height*width*channels bytes
  uint32_t scale_num = 0;            // fast path: DCT scale /8
  bool crop = false;                 // fast path: crop columns and skip rows
  uint32_t y0 = 0, y1 = 0, x0 = 0, x1 = 0;  // fast path: rows/columns wanted, full-size pixels
  uint8_t* region = nullptr;                // fast path: room for the whole image at that scale
};

// What it found. Plain data.
struct DecodeResult {
  uint32_t stream_h = 0, stream_w = 0, components = 0;
  uint32_t image_rows = 0, image_cols = 0;  // output size at the chosen scale
  uint32_t first_row = 0, rows = 0, first_col = 0, cols = 0;
};

// Grey 1x1, or YCbCr with luma 1x1/2x1/1x2/2x2 over 1x1 chroma, Huffman-coded, baseline or
// progressive: the layouts the crop/skip path is tested byte for byte on
// (tests/test_jpeg_crop_exact.cpp). Anything else decodes in full. A progressive stream is
// entropy-decoded whole in jpeg_start_decompress; the crop saves its IDCT and colour work only.
bool fast_path_layout(const jpeg_decompress_struct& cinfo) {
  if (cinfo.arith_code) return false;
  if (cinfo.num_components == 1) {
    return cinfo.comp_info[0].h_samp_factor == 1 && cinfo.comp_info[0].v_samp_factor == 1;
  }
  if (cinfo.num_components != 3 || cinfo.jpeg_color_space != JCS_YCbCr) return false;
  const jpeg_component_info* c = cinfo.comp_info;
  return c[0].h_samp_factor <= 2 && c[0].v_samp_factor <= 2 && c[1].h_samp_factor == 1 &&
         c[1].v_samp_factor == 1 && c[2].h_samp_factor == 1 && c[2].v_samp_factor == 1;
}

// Reads rows until output_scanline reaches `end`; row r goes to dst + (r - base) * stride.
void read_rows(jpeg_decompress_struct* cinfo, uint8_t* dst, size_t stride, uint32_t base,
               uint32_t end) {
  JSAMPROW rows[16];
  while (cinfo->output_scanline < end) {
    const uint32_t first = cinfo->output_scanline;
    const uint32_t n = std::min<uint32_t>(16, end - first);
    for (uint32_t i = 0; i < n; ++i) rows[i] = dst + size_t{first + i - base} * stride;
    jpeg_read_scanlines(cinfo, rows, n);
  }
}

}  // namespace

struct JpegScratch::Impl {
  jpeg_decompress_struct cinfo;
  ErrorMgr err;
  bool created = false;
  std::vector<uint8_t> image;     // full decodes of the reference path; scaled regions
  std::vector<int32_t> row;       // resample's vertical pass
  detail::JpegDecodeStats stats;  // the last decode
};

namespace {

// Returns the outcome; on kFailed err->message holds libjpeg's reason. Leaves the decoder in its
// start state. Trivially destructible locals only (see the file comment).
Status decode_guarded(JpegScratch::Impl* s, const DecodeJob& job, DecodeResult* res) {
  jpeg_decompress_struct* cinfo = &s->cinfo;
  if (setjmp(s->err.jump)) {
    jpeg_abort_decompress(cinfo);
    return Status::kFailed;
  }
  jpeg_mem_src(cinfo, job.data, static_cast<unsigned long>(job.size));
  jpeg_read_header(cinfo, TRUE);
  res->stream_h = cinfo->image_height;
  res->stream_w = cinfo->image_width;
  res->components = static_cast<uint32_t>(cinfo->num_components);
  if (cinfo->image_height != job.height || cinfo->image_width != job.width) {
    jpeg_abort_decompress(cinfo);
    return Status::kSizeMismatch;
  }
  if (cinfo->num_components != 1 && cinfo->num_components != 3) {
    jpeg_abort_decompress(cinfo);
    return Status::kBadComponents;
  }
  if (job.fast && !fast_path_layout(*cinfo)) {
    jpeg_abort_decompress(cinfo);
    return Status::kNeedsFull;
  }
  cinfo->out_color_space = job.channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  cinfo->dct_method = JDCT_ISLOW;
  cinfo->do_fancy_upsampling = TRUE;
  cinfo->scale_num = job.fast ? job.scale_num : 8;
  cinfo->scale_denom = 8;
  jpeg_start_decompress(cinfo);
  res->image_rows = cinfo->output_height;
  res->image_cols = cinfo->output_width;
  if (!job.fast) {
    read_rows(cinfo, job.out, size_t{job.width} * job.channels, 0, cinfo->output_height);
    jpeg_finish_decompress(cinfo);  // reads to EOI: damage after the last row is caught too
    res->rows = res->image_rows;
    res->cols = res->image_cols;
    return Status::kOk;
  }
  uint32_t row0 = 0, row1 = cinfo->output_height;
  if (job.crop) {
    const uint32_t imcu_cols =
        static_cast<uint32_t>(cinfo->max_h_samp_factor * cinfo->min_DCT_scaled_size);
    const detail::ScaledWindow w =
        detail::jpeg_scaled_window(job.y0, job.y1, job.x0, job.x1, job.scale_num,
                                   cinfo->output_height, cinfo->output_width, 2 * imcu_cols);
    row0 = w.row0;
    row1 = w.row1;
    JDIMENSION xoffset = w.col0, width = w.col1 - w.col0;
    if (width < cinfo->output_width) jpeg_crop_scanline(cinfo, &xoffset, &width);
    res->first_col = xoffset;
    res->cols = width;
  } else {
    res->first_col = 0;
    res->cols = cinfo->output_width;
  }
  const size_t stride = size_t{res->cols} * job.channels;
  if (row0 > 0) jpeg_skip_scanlines(cinfo, row0);
  read_rows(cinfo, job.region, stride, row0, row1);
  res->first_row = row0;
  res->rows = row1 - row0;
  if (res->rows == cinfo->output_height && !job.crop) {
    jpeg_finish_decompress(cinfo);
  } else {
    jpeg_abort_decompress(cinfo);  // the rest is not needed; EOI was checked up front
  }
  return Status::kOk;
}

JpegScratch::Impl* checked_scratch(JpegScratch* scratch) {
  if (scratch == nullptr || scratch->impl() == nullptr) throw jpeg_invalid("no JpegScratch given");
  return scratch->impl();
}

// Throws the error for a failed decode_guarded; returns for kOk and kNeedsFull.
void throw_if_failed(Status st, const JpegScratch::Impl* s, const DecodeJob& job,
                     const DecodeResult* res) {
  switch (st) {
    case Status::kOk:
    case Status::kNeedsFull:
      return;
    case Status::kFailed:
      throw jpeg_corrupt(s->err.message);
    case Status::kSizeMismatch:
      throw jpeg_corrupt("stream is " + std::to_string(res->stream_h) + "x" +
                         std::to_string(res->stream_w) + ", expected " +
                         std::to_string(job.height) + "x" + std::to_string(job.width));
    case Status::kBadComponents:
      throw jpeg_corrupt("stream has " + std::to_string(res->components) +
                         " components; expected 1 (grey) or 3 (YCbCr)");
  }
}

// Full-size decode into `out` (throws on failure); updates the stats.
void decode_full(JpegScratch::Impl* s, const uint8_t* data, size_t size, uint32_t height,
                 uint32_t width, uint32_t channels, uint8_t* out) {
  DecodeJob job{data, size, height, width, channels};  // the path's fields follow
  job.fast = false;
  job.out = out;
  DecodeResult res;
  s->stats = detail::JpegDecodeStats{};
  throw_if_failed(decode_guarded(s, job, &res), s, job, &res);
  s->stats.rows = s->stats.image_rows = res.image_rows;
  s->stats.cols = s->stats.image_cols = res.image_cols;
}

}  // namespace

bool jpeg_supported() { return true; }

JpegScratch::JpegScratch() : impl_(new Impl()) {
  // jpeg_create_decompress reports failure (out of memory, library mismatch) via error_exit.
  init_error_mgr(&impl_->err);
  impl_->cinfo.err = &impl_->err.pub;
  if (setjmp(impl_->err.jump)) {
    const std::string reason = impl_->err.message;
    delete impl_;
    throw Error(ErrorKind::kIOError, "", "jpeg: cannot create a decoder: " + reason);
  }
  jpeg_create_decompress(&impl_->cinfo);
  impl_->created = true;
}

JpegScratch::~JpegScratch() {
  if (impl_->created) jpeg_destroy_decompress(&impl_->cinfo);
  delete impl_;
}

namespace detail {
JpegDecodeStats last_decode_stats(const JpegScratch& scratch) {
  return scratch.impl() != nullptr ? scratch.impl()->stats : JpegDecodeStats{};
}
}  // namespace detail

JpegInfo jpeg_info(const uint8_t* data, size_t size) {
  check_jpeg_stream(data, size);
  // A decoder of its own: this entry point has no scratch. The guarded part is inline here:
  // every local below is trivially destructible.
  jpeg_decompress_struct cinfo{};  // zeroed: destroying it before create finished is a no-op
  ErrorMgr err;
  init_error_mgr(&err);
  cinfo.err = &err.pub;
  JpegInfo info;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    throw jpeg_corrupt(err.message);
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  info.height = cinfo.image_height;
  info.width = cinfo.image_width;
  info.channels = static_cast<uint32_t>(cinfo.num_components);
  jpeg_destroy_decompress(&cinfo);
  if (info.channels != 1 && info.channels != 3) {
    throw jpeg_corrupt("stream has " + std::to_string(info.channels) +
                       " components; expected 1 (grey) or 3 (YCbCr)");
  }
  return info;
}

namespace {

// The stream's own frame header against the size the caller (an index row) claims: a lying row
// (65500x65500 over a 64x79 stream) is Corruption here, before a buffer of its claimed size is
// allocated. Only called when a buffer would grow, so a warm decoder pays nothing.
void check_header(const uint8_t* data, size_t size, uint32_t height, uint32_t width) {
  const JpegInfo info = jpeg_info(data, size);
  if (info.height != height || info.width != width) {
    throw jpeg_corrupt("stream is " + std::to_string(info.height) + "x" +
                       std::to_string(info.width) + ", expected " + std::to_string(height) + "x" +
                       std::to_string(width));
  }
}

}  // namespace

void jpeg_encode(const uint8_t* pixels, uint32_t height, uint32_t width, uint32_t channels,
                 int quality, std::vector<uint8_t>* out) {
  detail::JpegLayout layout;
  layout.quality = quality;
  detail::jpeg_encode_layout(pixels, height, width, channels, layout, out);
}

void detail::jpeg_encode_layout(const uint8_t* pixels, uint32_t height, uint32_t width,
                                uint32_t channels, const JpegLayout& layout,
                                std::vector<uint8_t>* out) {
  check_jpeg_shape(height, width, channels);
  if (layout.quality < 1 || layout.quality > 100) {
    throw jpeg_invalid("quality must be in 1..100, not " + std::to_string(layout.quality));
  }
  if (layout.luma_h < 1 || layout.luma_h > 2 || layout.luma_v < 1 || layout.luma_v > 2) {
    throw jpeg_invalid("luma sampling factors must be 1 or 2, not " +
                       std::to_string(layout.luma_h) + "x" + std::to_string(layout.luma_v));
  }
  if (pixels == nullptr || out == nullptr) throw jpeg_invalid("null pixels or output");
  MemDest dest{};
  dest.pub.init_destination = dest_init;
  dest.pub.empty_output_buffer = dest_empty;
  dest.pub.term_destination = dest_term;
  dest.capacity = std::max<size_t>(4096, size_t{height} * width * channels / 4);
  dest.buffer = static_cast<unsigned char*>(std::malloc(dest.capacity));
  if (dest.buffer == nullptr) throw Error(ErrorKind::kIOError, "", "jpeg: out of memory");
  dest.pub.next_output_byte = dest.buffer;
  dest.pub.free_in_buffer = dest.capacity;
  jpeg_compress_struct cinfo{};  // zeroed: destroying it before create finished is a no-op
  ErrorMgr err;
  init_error_mgr(&err);
  const EncodeJob job{pixels, height, width, channels, layout};
  const bool ok = encode_guarded(job, &cinfo, &err, &dest);
  jpeg_destroy_compress(&cinfo);  // safe after a failure at any point after create
  if (!ok) {
    std::free(dest.buffer);
    throw jpeg_invalid(std::string("encoder failed: ") + err.message);
  }
  out->assign(dest.buffer, dest.buffer + dest.used);
  std::free(dest.buffer);
}

void jpeg_decode(const uint8_t* data, size_t size, uint32_t height, uint32_t width,
                 uint32_t channels, uint8_t* out, JpegScratch* scratch) {
  check_jpeg_shape(height, width, channels);
  JpegScratch::Impl* s = checked_scratch(scratch);
  if (out == nullptr) throw jpeg_invalid("null output");
  check_jpeg_stream(data, size);
  decode_full(s, data, size, height, width, channels, out);
}

void jpeg_decode_crop(const uint8_t* data, size_t size, uint32_t height, uint32_t width,
                      uint32_t channels, const CropBox& box, uint32_t out_h, uint32_t out_w,
                      uint8_t* out, JpegScratch* scratch, const JpegDecodeOptions& options) {
  check_jpeg_shape(height, width, channels);
  JpegScratch::Impl* s = checked_scratch(scratch);
  if (out == nullptr) throw jpeg_invalid("null output");
  detail::check_jpeg_crop(height, width, box, out_h, out_w);
  check_jpeg_stream(data, size);

  const uint32_t m = options.scale ? detail::jpeg_scale_num(box, out_h, out_w) : 8;
  const bool fast = m != 8 || options.crop;
  DecodeResult res;
  if (fast) {
    const size_t need = size_t{detail::ceil_scaled(height, m)} * detail::ceil_scaled(width, m) *
                        channels;  // upper bound
    if (s->image.size() < need) {
      check_header(data, size, height, width);  // before allocating what the caller claims
      s->image.resize(need);
    }
    DecodeJob job{data, size, height, width, channels};  // the path's fields follow
    job.fast = true;
    job.scale_num = m;
    job.crop = options.crop;
    job.y0 = box.y;
    job.y1 = box.y + box.height;
    job.x0 = box.x;
    job.x1 = box.x + box.width;
    job.region = s->image.data();
    s->stats = detail::JpegDecodeStats{};
    const Status st = decode_guarded(s, job, &res);
    if (st == Status::kOk) {
      s->stats.fast = true;
      s->stats.scale_num = m;
      s->stats.first_row = res.first_row;
      s->stats.rows = res.rows;
      s->stats.first_col = res.first_col;
      s->stats.cols = res.cols;
      s->stats.image_rows = res.image_rows;
      s->stats.image_cols = res.image_cols;
      detail::AxisTaps ty, tx;
      detail::jpeg_crop_taps(box, out_h, out_w, m, res.first_row, res.rows, res.first_col, res.cols,
                             &ty, &tx);
      detail::resample(s->image.data(), size_t{res.cols} * channels, channels, ty, tx, out_h, out_w,
                       box.flip, out, &s->row);
      return;
    }
    throw_if_failed(st, s, job, &res);  // returns only for kNeedsFull: decode in full
  }
  // The reference path: the whole image, then crop_resize.
  const size_t need = size_t{height} * width * channels;
  if (s->image.size() < need) {
    check_header(data, size, height, width);
    s->image.resize(need);
  }
  decode_full(s, data, size, height, width, channels, s->image.data());
  const ImageView view{s->image.data(), height, width, channels};
  crop_resize(view, box, out_h, out_w, out);
}

}  // namespace dscache
