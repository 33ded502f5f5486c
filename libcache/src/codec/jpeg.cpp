// Serve-time JPEG decode with libjpeg-turbo's libjpeg API (jpeglib.h); jpeg_encode.cpp encodes
// (feature jpeg; jpeg_stub.cpp stands in without it). The byte-level stream checks
// (jpeg_stream.cpp), the crop geometry (jpeg_crop.cpp) and the restart segments
// (jpeg_segments.cpp) need no libjpeg.
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

#include "codec/jpeg_internal.h"
#include "codec/jpeg_libjpeg.h"
#include "codec/resample.h"
#include "dscache/error.h"

namespace dscache {

namespace {

using detail::check_jpeg_shape;
using detail::check_jpeg_stream;
using detail::ErrorMgr;
using detail::init_error_mgr;
using detail::jpeg_corrupt;
using detail::jpeg_invalid;

static_assert(detail::kJpegMaxSide == JPEG_MAX_DIMENSION, "jpeg_internal.h's limit is libjpeg's");

// ---------------------------------------------------------------------------------------------
// Decoding

enum class Status { kOk, kFailed, kSizeMismatch, kBadComponents, kNeedsFull };

// What a guarded decode is asked to do. Plain data.
struct DecodeJob {
  const uint8_t* data;
  size_t size;
  uint32_t height, width, channels;  // expected stream size, output channels
  bool fast = false;                 // scale/crop path (else: every row, at scale_num/8, to out)
  uint8_t* out = nullptr;            // full path: the scaled height*width*channels bytes
  uint32_t scale_num = 8;            // DCT scale /8 (8: full size)
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
  detail::JpegSegments segments;  // the crop path's index of the stream's restart segments
  std::vector<uint8_t> cut;       // and the cut it decodes
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
  cinfo->scale_num = job.scale_num;
  cinfo->scale_denom = 8;
  jpeg_start_decompress(cinfo);
  res->image_rows = cinfo->output_height;
  res->image_cols = cinfo->output_width;
  if (!job.fast) {
    read_rows(cinfo, job.out, size_t{cinfo->output_width} * job.channels, 0, cinfo->output_height);
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

// Every row, at scale_num/8 (8: full size), into `out` (throws on failure); updates the stats.
void decode_full(JpegScratch::Impl* s, const uint8_t* data, size_t size, uint32_t height,
                 uint32_t width, uint32_t channels, uint8_t* out, uint32_t scale_num = 8) {
  DecodeJob job{data, size, height, width, channels};  // the path's fields follow
  job.fast = false;
  job.scale_num = scale_num;
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

// With a crop, a stream whose restart segments allow it, and a cut that leaves something out:
// points `job` at the cut (scratch memory) in the cut's coordinates. Returns the cut (useful
// false: job unchanged).
detail::SegmentCut cut_segments(JpegScratch::Impl* s, const uint8_t* data, size_t size,
                                DecodeJob* job) {
  detail::SegmentCut cut;
  if (!job->crop || !detail::jpeg_index_segments(data, size, &s->segments)) return cut;
  cut = detail::jpeg_segment_cut(s->segments, job->y0, job->y1, job->x0, job->x1);
  if (!cut.useful) return detail::SegmentCut{};
  detail::jpeg_write_cut(data, s->segments, cut, &s->cut);
  job->data = s->cut.data();
  job->size = s->cut.size();
  job->height = cut.height;
  job->width = cut.width;
  job->y0 -= cut.y;
  job->y1 -= cut.y;
  job->x0 -= cut.x;
  job->x1 -= cut.x;
  return cut;
}

}  // namespace

void jpeg_decode(const uint8_t* data, size_t size, uint32_t height, uint32_t width,
                 uint32_t channels, uint8_t* out, JpegScratch* scratch) {
  check_jpeg_shape(height, width, channels);
  JpegScratch::Impl* s = checked_scratch(scratch);
  if (out == nullptr) throw jpeg_invalid("null output");
  check_jpeg_stream(data, size);
  decode_full(s, data, size, height, width, channels, out);
}

void jpeg_decode_scaled(const uint8_t* data, size_t size, uint32_t height, uint32_t width,
                        uint32_t channels, uint32_t denom, uint8_t* out, JpegScratch* scratch) {
  check_jpeg_shape(height, width, channels);
  JpegScratch::Impl* s = checked_scratch(scratch);
  if (out == nullptr) throw jpeg_invalid("null output");
  if (denom != 1 && denom != 2 && denom != 4 && denom != 8) {
    throw jpeg_invalid("scale denominator must be 1, 2, 4 or 8, not " + std::to_string(denom));
  }
  check_jpeg_stream(data, size);
  decode_full(s, data, size, height, width, channels, out, 8 / denom);
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
    const detail::SegmentCut cut = cut_segments(s, data, size, &job);
    const Status st = decode_guarded(s, job, &res);
    if (st == Status::kOk) {
      // Back from the cut's coordinates to the frame's (its origin is whole MCUs, so whole
      // scaled pixels).
      res.first_row += detail::floor_scaled(cut.y, m);
      res.first_col += detail::floor_scaled(cut.x, m);
      s->stats.fast = true;
      s->stats.segments = cut.useful;
      s->stats.stream_bytes = job.size;
      s->stats.scale_num = m;
      s->stats.first_row = res.first_row;
      s->stats.rows = res.rows;
      s->stats.first_col = res.first_col;
      s->stats.cols = res.cols;
      s->stats.image_rows = detail::ceil_scaled(height, m);
      s->stats.image_cols = detail::ceil_scaled(width, m);
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
