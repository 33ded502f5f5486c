#include "build_decode.h"

#include <tbb/concurrent_queue.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>

#include <memory>

#include "dscache/checksum.h"
#include "dscache/ingest/image_decode.h"
#include "dscache/jpeg.h"

namespace dscache {

SampleDecoder::SampleDecoder(const SourceListing& src, const BuildRecipe& r, bool ragged,
                             Codec codec)
    : src_(src),
      recipe_(r),
      codec_(codec),
      decoder_(r, ragged ? Layout::kRagged : Layout::kFixed) {}

size_t SampleDecoder::fixed_bytes() const { return decoder_.fixed_bytes(); }

void SampleDecoder::decode(Token* t) const {
  const SourceEntry& e = src_.entries[t->entry];
  const BuildRecipe& r = recipe_;
  t->reason.clear();
  if (src_.idx) {
    decoder_.decode_pixels(src_.idx->image(t->entry), src_.idx->rows, src_.idx->cols, 1, &t->pixels,
                           &t->height, &t->width);
    t->ok = true;
  } else {
    t->ok = decoder_.decode_file(e.path, &e, &t->pixels, &t->height, &t->width, &t->reason);
  }
  if (!t->ok) return;
  const size_t bytes = size_t{t->height} * t->width * r.channels;
  if (codec_ == Codec::kJpeg) {
    jpeg_encode(t->pixels.data(), t->height, t->width, r.channels, static_cast<int>(r.quality),
                &t->stored);
    t->checksum = xxh64(t->stored.data(), t->stored.size());
  } else {
    t->checksum = xxh64(t->pixels.data(), bytes);
  }
}

void run_decode_pipeline(const SampleDecoder& decoder, const std::vector<uint64_t>& order,
                         uint64_t start, uint64_t end, int threads,
                         const std::function<bool(const Token&)>& consume) {
  set_decode_threads(0);  // our threads are the parallelism; OpenCV's own pool would oversubscribe

  const size_t ntokens = static_cast<size_t>(threads) * 4;
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
