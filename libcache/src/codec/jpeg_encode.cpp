// JPEG encoding with libjpeg-turbo's libjpeg API: the streams a JPEG cache stores (baseline,
// optimized Huffman tables, restart segments for the crop decoder) and the layouts the tests
// and benches need. One of the two files that include libjpeg (jpeg_libjpeg.h).
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "codec/jpeg_internal.h"
#include "codec/jpeg_libjpeg.h"
#include "dscache/error.h"
#include "dscache/jpeg.h"

namespace dscache {

namespace {

using detail::ErrorMgr;
using detail::init_error_mgr;
using detail::jpeg_invalid;

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
  if (job.layout.progressive) {
    jpeg_simple_progression(cinfo);
  } else {  // restart segments let the crop decoder skip what a box does not need
    const uint32_t mcu_h = job.channels == 3 ? 8 * job.layout.luma_v : 8;
    const uint32_t mcu_w = job.channels == 3 ? 8 * job.layout.luma_h : 8;
    cinfo->restart_interval = job.layout.restart >= 0 ? static_cast<unsigned>(job.layout.restart)
                                                      : detail::jpeg_restart_interval(
                                                            job.height, job.width, mcu_h, mcu_w);
  }
  jpeg_start_compress(cinfo, TRUE);
  const size_t stride = size_t{job.width} * job.channels;
  while (cinfo->next_scanline < cinfo->image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(job.pixels + cinfo->next_scanline * stride);
    jpeg_write_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_compress(cinfo);
  return true;
}

}  // namespace

void jpeg_encode(const uint8_t* pixels, uint32_t height, uint32_t width, uint32_t channels,
                 int quality, std::vector<uint8_t>* out) {
  jpeg_encode(pixels, height, width, channels, JpegEncodeOptions{quality, true}, out);
}

void jpeg_encode(const uint8_t* pixels, uint32_t height, uint32_t width, uint32_t channels,
                 const JpegEncodeOptions& options, std::vector<uint8_t>* out) {
  detail::JpegLayout layout;
  layout.quality = options.quality;
  layout.restart = options.restart_markers ? -1 : 0;
  detail::jpeg_encode_layout(pixels, height, width, channels, layout, out);
}

void detail::jpeg_encode_layout(const uint8_t* pixels, uint32_t height, uint32_t width,
                                uint32_t channels, const JpegLayout& layout,
                                std::vector<uint8_t>* out) {
  detail::check_jpeg_shape(height, width, channels);
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

}  // namespace dscache
