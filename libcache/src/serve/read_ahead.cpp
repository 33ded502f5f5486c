// ReadAhead: which batches touch which window of a windowed epoch, and the hints given as the
// consumer moves through them.
#include "serve/read_ahead.h"

#include <algorithm>

#include "dscache/cache.h"
#include "dscache/error.h"

namespace dscache {
namespace detail {

SamplerOptions resolve_window_for(const SampleSource& source, const SamplerOptions& options,
                                  uint64_t in_flight_samples) {
  if (options.shuffle != Shuffle::kWindowed) return options;
  const uint64_t n = source.size();
  const uint64_t stored = source.stored_bytes();
  const uint64_t per_sample = n == 0 || stored == 0 ? 1 : std::max<uint64_t>(1, stored / n);
  const auto* cache = dynamic_cast<const Cache*>(&source);
  const uint64_t room = cache == nullptr ? 0 : cache->streaming_budget();
  if (room == 0) {
    if (options.block != 0) return options;
    const uint64_t available = options.window_bytes == 0 ? available_memory_bytes() : 0;
    return resolve_window(options, n, per_sample, available);
  }
  // A streamed cache: a block is a shard (what is downloaded at once). At hand together: the
  // windows the batches being filled draw from (one more than they span: they may straddle),
  // the next one, being fetched, and a shard a block straddles.
  const uint64_t shard = source.locality_block() * per_sample;
  SamplerOptions o = options;
  if (o.block == 0) {
    if (o.block_bytes == 0) o.block_bytes = shard;
    if (o.window_bytes == 0) {
      o.window_bytes =
          std::max((room > shard ? room - shard : 0) / 3, in_flight_samples * per_sample);
    }
    o = resolve_window(o, n, per_sample, 0);
  }
  const uint64_t window = std::min(o.block * o.window_blocks, std::max<uint64_t>(n, 1));
  const uint64_t windows =
      std::min((in_flight_samples + window - 1) / window + 2, (n + window - 1) / window);
  const uint64_t need = windows * window * per_sample + shard;
  if (need > room) {
    throw Error(ErrorKind::kInvalidArgument, "loader",
                "the cache streams through a local cache whose budget leaves " +
                    std::to_string(room) + " bytes for its shards, and this Loader needs " +
                    std::to_string(need) + " at hand together (" + std::to_string(windows) +
                    " windows of " + std::to_string(window) + " samples, " +
                    std::to_string(per_sample) +
                    " bytes each, and a shard: the windows that the batches filled at once, "
                    "(prefetch + 1) x batch_size x world_size samples, draw from, and the next "
                    "one, fetched ahead); raise --local-cache-size, or lower batch_size, "
                    "prefetch or the window");
  }
  return o;
}

ReadAhead::ReadAhead(const SamplerOptions& options, uint64_t n, uint64_t seed, uint64_t epoch,
                     uint64_t batch_size, uint64_t samples_per_epoch, uint64_t cursor) {
  const std::vector<uint64_t> blocks = epoch_blocks(n, options, seed, epoch);
  if (blocks.empty() || samples_per_epoch == 0) return;
  const uint64_t block = options.block == 0 || options.block > n ? n : options.block;
  const uint64_t per_window = options.window_blocks;
  uint64_t start = 0;  // the window's first position in the epoch's global order
  for (size_t b = 0; b < blocks.size(); b += per_window) {
    Window w;
    uint64_t samples = 0;
    for (size_t k = b; k < blocks.size() && k < b + per_window; ++k) {
      const uint64_t first = blocks[k] * block;
      const uint64_t count = std::min(first + block, n) - first;
      w.blocks.push_back(Range{first, count});
      samples += count;
    }
    // Global positions [start, end) hold the rank's local positions [p_first, p_end).
    const uint64_t end = start + samples;
    const uint64_t p_first = rank_positions_below(options, start);
    const uint64_t p_end = rank_positions_below(options, end);
    if (p_end > 0) {
      const uint64_t p_last = std::min(p_end - 1, samples_per_epoch - 1);
      if (p_first <= p_last) {
        w.visited = true;
        w.first_batch = p_first / batch_size;
        w.last_batch = p_last / batch_size;
      }
    }
    if (w.visited && w.last_batch < cursor) w.visited = false;  // already served (restore)
    windows_.push_back(std::move(w));
    start = end;
  }
}

void ReadAhead::will_need_through(const SampleSource& source, uint64_t filling) {
  // Windows [0, reached_) may be in the workers' hands; advise them and the next visited one,
  // which is then read while they are served.
  while (reached_ < windows_.size() &&
         (!windows_[reached_].visited || windows_[reached_].first_batch <= filling)) {
    ++reached_;
  }
  const size_t limit = std::min(reached_ + 1, windows_.size());
  for (; will_need_ < limit; ++will_need_) {
    const Window& w = windows_[will_need_];
    if (!w.visited) continue;
    for (const Range& r : w.blocks) source.advise(r.first, r.count, Advice::kWillNeed);
  }
}

void ReadAhead::begin(const SampleSource& source, uint64_t filling) {
  will_need_through(source, filling);
}

void ReadAhead::advance(const SampleSource& source, uint64_t filled, uint64_t filling) {
  while (dont_need_ < windows_.size()) {
    const Window& w = windows_[dont_need_];
    if (w.visited) {
      if (w.last_batch > filled) break;
      for (const Range& r : w.blocks) source.advise(r.first, r.count, Advice::kDontNeed);
    }
    ++dont_need_;
  }
  will_need_through(source, filling);
}

}  // namespace detail
}  // namespace dscache
