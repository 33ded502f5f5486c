#include "build_decode.h"

#include <tbb/concurrent_queue.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "dscache/checksum.h"
#include "dscache/ingest/coco.h"
#include "dscache/ingest/image_decode.h"
#include "dscache/jpeg.h"

namespace dscache {

namespace {

bool spatial(const FieldSpec& f) {
  return f.kind == FieldKind::kMask || f.kind == FieldKind::kBoxes;
}

}  // namespace

SampleDecoder::SampleDecoder(const SourceListing& src, const BuildRecipe& r, bool ragged,
                             Codec codec)
    : src_(src), recipe_(r), codec_(codec), decoder_(r, ragged ? Layout::kRagged : Layout::kFixed) {
  // Masks and boxes are drawn on the stored pixel grid: an EXIF rotation would move the image
  // away from them.
  for (const FieldSpec& f : src.fields) {
    if (spatial(f)) decoder_.set_ignore_orientation(true);
  }
}

size_t SampleDecoder::fixed_bytes() const { return decoder_.fixed_bytes(); }

void SampleDecoder::decode(Token* t) const {
  const SourceEntry& e = src_.entries[t->entry];
  const BuildRecipe& r = recipe_;
  t->reason.clear();
  t->transparent = false;
  SampleGeometry g;
  if (!e.bad.empty()) {  // the listing could not make a sample of this row
    t->ok = false;
    t->reason = e.bad;
    return;
  }
  if (src_.idx) {
    decoder_.decode_pixels(src_.idx->image(t->entry), src_.idx->rows, src_.idx->cols, 1, &t->pixels,
                           &t->height, &t->width);
    t->ok = true;
  } else {
    t->ok = decoder_.decode_file(e.path, &e, &t->pixels, &t->height, &t->width, &t->reason, &g,
                                 &t->transparent);
  }
  if (!t->ok) return;
  if (!src_.fields.empty() && !make_fields(t, g)) {
    t->ok = false;
    return;
  }
  const size_t bytes = size_t{t->height} * t->width * r.channels;
  if (codec_ == Codec::kJpeg) {
    // The test hook writes streams as dscache did before restart markers (an older cache).
    static const bool no_restart = std::getenv("DSCACHE_TEST_JPEG_NO_RESTART") != nullptr;
    JpegEncodeOptions o;
    o.quality = static_cast<int>(r.quality);
    o.restart_markers = !no_restart;
    jpeg_encode(t->pixels.data(), t->height, t->width, r.channels, o, &t->stored);
    t->checksum = xxh64(t->stored.data(), t->stored.size());
  } else {
    t->checksum = xxh64(t->pixels.data(), bytes);
  }
}

bool SampleDecoder::source_mask(size_t f, uint64_t e, const SampleGeometry& g,
                                std::vector<uint8_t>* mask, std::string* reason) const {
  const FieldSpec& spec = src_.fields[f];
  const uint32_t want = element_bytes(spec.dtype);
  if (src_.coco) {
    const CocoImage& im = src_.coco->images[e];
    if (im.height != g.source_height || im.width != g.source_width) {
      *reason = "the image is " + std::to_string(g.source_width) + "x" +
                std::to_string(g.source_height) + ", its COCO record says " +
                std::to_string(im.width) + "x" + std::to_string(im.height);
      return false;
    }
    mask->resize(size_t{im.height} * im.width);
    rasterize_semantic(*src_.coco, e, mask->data());
    return true;
  }
  const FieldData v = src_.columns.get(f, e);
  const std::string path(static_cast<const char*>(v.data), v.bytes);
  thread_local std::vector<uint8_t> bytes;
  std::string why;
  uint32_t h = 0, w = 0, elem = 0;
  if (!read_whole_file(path, bytes, why) ||
      !decode_mask(bytes.data(), bytes.size(), mask, &h, &w, &elem, &why)) {
    *reason = "mask " + path + ": " + why;
    return false;
  }
  if (h != g.source_height || w != g.source_width) {
    *reason = "mask " + path + " is " + std::to_string(w) + "x" + std::to_string(h) +
              ", its image " + std::to_string(g.source_width) + "x" +
              std::to_string(g.source_height);
    return false;
  }
  if (elem == want) return true;
  if (elem == 2 && want == 1) {  // a 16-bit file whose ids fit the field's uint8
    const size_t n = size_t{h} * w;
    for (size_t i = 0; i < n; ++i) {
      const uint16_t id = uint16_t((*mask)[2 * i] | ((*mask)[2 * i + 1] << 8));
      if (id > 255) {
        *reason = "mask " + path + " holds class id " + std::to_string(id) +
                  ", over the uint8 field '" + spec.name + "'";
        return false;
      }
      (*mask)[i] = uint8_t(id);
    }
    mask->resize(n);
    return true;
  }
  mask->resize(size_t{h} * w * 2);  // 8-bit ids widened for a uint16 field, little-endian
  for (size_t i = size_t{h} * w; i-- > 0;) {
    (*mask)[2 * i] = (*mask)[i];
    (*mask)[2 * i + 1] = 0;
  }
  return true;
}

bool SampleDecoder::make_fields(Token* t, const SampleGeometry& g) const {
  const size_t n = src_.fields.size();
  t->fields.resize(n);
  std::vector<std::vector<uint32_t>> kept(n);  // boxes fields: the rows that stay
  thread_local std::vector<uint8_t> mask;
  thread_local std::vector<float> boxes;
  for (size_t f = 0; f < n; ++f) {
    const FieldSpec& spec = src_.fields[f];
    const FieldData v = src_.columns.get(f, t->entry);
    std::vector<uint8_t>& out = t->fields[f];
    if (spec.kind == FieldKind::kMask) {
      if (!source_mask(f, t->entry, g, &mask, &t->reason)) return false;
      const uint32_t e = element_bytes(spec.dtype);
      out.resize(size_t{g.width} * g.height * e);
      map_mask(mask.data(), g.source_height, g.source_width, e, g, 0, out.data());
    } else if (spec.kind == FieldKind::kBoxes) {
      const size_t rows = v.bytes / 16;
      boxes.resize(rows * 4);
      if (rows) std::memcpy(boxes.data(), v.data, rows * 16);
      out.resize(rows * 16);
      const size_t k =
          map_boxes(boxes.data(), rows, g, reinterpret_cast<float*>(out.data()), &kept[f]);
      out.resize(k * 16);
    } else {
      const auto* p = static_cast<const uint8_t*>(v.data);
      out.assign(p, p + v.bytes);
    }
  }
  for (size_t f = 0; f < n; ++f) {  // rows that follow their boxes keep the boxes' rows
    const FieldSpec& spec = src_.fields[f];
    if (spec.rows_of.empty()) continue;
    for (size_t b = 0; b < n; ++b) {
      if (src_.fields[b].name != spec.rows_of) continue;
      const size_t row = spec.row_bytes();
      std::vector<uint8_t> all = std::move(t->fields[f]);
      std::vector<uint8_t>& out = t->fields[f];
      out.clear();
      for (uint32_t r : kept[b]) {
        out.insert(out.end(), all.begin() + r * row, all.begin() + (r + 1) * row);
      }
    }
  }
  return true;
}

void run_decode_pipeline(const SampleDecoder& decoder, const std::vector<uint64_t>& order,
                         uint64_t start, uint64_t end, int threads,
                         const std::function<bool(const Token&)>& consume) {
  set_decode_threads(0);  // our threads are the parallelism; OpenCV's own pool would oversubscribe

  // Tokens in flight: the in-order writer holds every finished sample behind the oldest one
  // still decoding, so while one thread spends seconds on a giant image (a 600-Mpx PNG) the
  // others run on only as far as the tokens reach. A fixed sample is small: allow up to 256
  // per thread within 64 MiB of pixels (64x64 RGB: 512 tokens, 6 MiB); ragged samples vary in
  // size, so they keep 4 per thread.
  const size_t sample = decoder.fixed_bytes();
  const size_t by_memory = sample ? (size_t{64} << 20) / sample : 0;
  const size_t ntokens = static_cast<size_t>(threads) *
                         std::clamp<size_t>(by_memory / static_cast<size_t>(threads), 4, 256);
  std::vector<std::unique_ptr<Token>> tokens_owned;
  tbb::concurrent_queue<Token*> pool;
  for (size_t i = 0; i < ntokens; ++i) {
    tokens_owned.push_back(std::make_unique<Token>());
    tokens_owned.back()->pixels.resize(decoder.fixed_bytes());
    pool.push(tokens_owned.back().get());
  }

  uint64_t next = start;
  bool stopped = false;  // set by the serial consumer stage
  tbb::task_arena arena(threads);
  arena.execute([&] {
    tbb::parallel_pipeline(
        ntokens,
        tbb::make_filter<void, Token*>(tbb::filter_mode::serial_in_order,
                                       [&](tbb::flow_control& fc) -> Token* {
                                         if (next >= end || stopped) {
                                           fc.stop();
                                           return nullptr;
                                         }
                                         Token* t = nullptr;
                                         pool.try_pop(t);  // never empty: at most ntokens in flight
                                         t->index = next;
                                         t->entry = order[next++];
                                         return t;
                                       }) &
            tbb::make_filter<Token*, Token*>(tbb::filter_mode::parallel,
                                             [&](Token* t) -> Token* {
                                               decoder.decode(t);
                                               return t;
                                             }) &
            tbb::make_filter<Token*, void>(tbb::filter_mode::serial_in_order, [&](Token* t) {
              if (!stopped && !consume(*t)) stopped = true;
              pool.push(t);
            }));
  });
}

}  // namespace dscache
