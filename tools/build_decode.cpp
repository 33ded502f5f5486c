#include "build_decode.h"

#include <opencv2/core.hpp>

#include <tbb/concurrent_queue.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>

#include <sys/stat.h>

#include <memory>

#include "dscache/checksum.h"
#include "dscache/ingest/source_decoder.h"
#include "dscache/jpeg.h"

namespace dscache {
namespace {

// The bytes just read are those the listing saw (its size and modification time, recorded in
// the manifest's source digest) only if the file still has that size and time now: a file
// deleted, truncated or rewritten since the listing is a skip, never a sample of other bytes.
bool unchanged_since_listing(const SourceEntry& e, size_t bytes_read, std::string* reason) {
  struct stat st;
  if (::stat(e.path.c_str(), &st) != 0) {
    *reason = "vanished while the build ran";
    return false;
  }
  const int64_t mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  if (bytes_read != e.size || static_cast<uint64_t>(st.st_size) != e.size ||
      mtime_ns != e.mtime_ns) {
    *reason = "changed while the build ran (listed " + std::to_string(e.size) + " bytes, read " +
              std::to_string(bytes_read) + ", now " + std::to_string(st.st_size) +
              (mtime_ns != e.mtime_ns ? ", modified)" : ")");
    return false;
  }
  return true;
}

}  // namespace

SampleDecoder::SampleDecoder(const SourceListing& src, const BuildRecipe& r, bool ragged,
                             Codec codec)
    : src_(src), recipe_(r), ragged_(ragged), codec_(codec) {
  dopt_.height = ragged ? 1 : r.height;  // unused by the ragged decode
  dopt_.width = ragged ? 1 : r.width;
  dopt_.channels = r.channels;
  dopt_.resize = r.resize;
  dopt_.reduced_decode = r.reduced_decode;
  dopt_.max_pixels = r.max_pixels;
}

size_t SampleDecoder::fixed_bytes() const {
  return ragged_ ? 0 : size_t{recipe_.height} * recipe_.width * recipe_.channels;
}

void SampleDecoder::decode(Token* t) const {
  const SourceEntry& e = src_.entries[t->entry];
  const BuildRecipe& r = recipe_;
  t->reason.clear();
  if (src_.idx && ragged_) {
    resize_pixels_ragged(src_.idx->image(t->entry), src_.idx->rows, src_.idx->cols, 1, r.channels,
                         r.max_side, &t->pixels, &t->height, &t->width);
    t->ok = true;
  } else if (src_.idx) {
    resize_pixels(src_.idx->image(t->entry), src_.idx->rows, src_.idx->cols, 1, dopt_,
                  t->pixels.data());
    t->ok = true;
  } else if (read_whole_file(e.path, t->file, t->reason) &&
             unchanged_since_listing(e, t->file.size(), &t->reason)) {
    DecodeResult d = ragged_
                         ? decode_image_ragged(t->file.data(), t->file.size(), dopt_, r.max_side,
                                               &t->pixels, &t->height, &t->width)
                         : decode_image(t->file.data(), t->file.size(), dopt_, t->pixels.data());
    t->ok = d.ok;
    t->reason = d.reason;
  } else {
    t->ok = false;
  }
  if (!t->ok) return;
  if (!ragged_) {
    t->height = r.height;
    t->width = r.width;
  }
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
  cv::setNumThreads(0);  // our threads are the parallelism; OpenCV's own pool would oversubscribe

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
