// ReadAhead: the Loader's IO hints for the windowed shuffle — read the next window ahead, drop
// the finished one — and the byte-sized window resolved for a source.
#pragma once

#include <cstdint>
#include <vector>

#include "dscache/sample_source.h"
#include "dscache/sampler.h"

namespace dscache {
namespace detail {

// resolve_window() for `source`: its stored bytes per sample, and available_memory_bytes()
// when the window is auto-sized (read only then). A streamed Cache (Cache::streaming_budget):
// a block is a shard, and an auto window the larger of a third of the room the shards may take
// and `in_flight_samples` (the global positions of the batches a Loader fills at once);
// Error(kInvalidArgument) naming the numbers when the windows at hand together (those the
// batches being filled draw from, and the next one, fetched ahead) and a shard do not fit in
// that room, for an auto or an explicit window alike.
SamplerOptions resolve_window_for(const SampleSource& source, const SamplerOptions& options,
                                  uint64_t in_flight_samples = 0);

// One rank's epoch cut into the windows of a kWindowed order, each with the batches that touch
// it. advance() tells the source (SampleSource::advise) kWillNeed for a window as soon as the
// workers may start filling the window before it — so the next window is being read while this
// one is served — and kDontNeed once every batch holding its samples was filled. Plans nothing
// for other shuffles. Used by the Loader's consumer thread only; not thread-safe.
class ReadAhead {
 public:
  ReadAhead() = default;
  // `options` resolved (block in samples); `cursor`: the first batch that will be served
  // (restore); windows wholly before it are never advised.
  ReadAhead(const SamplerOptions& options, uint64_t n, uint64_t seed, uint64_t epoch,
            uint64_t batch_size, uint64_t samples_per_epoch, uint64_t cursor);

  // Batches [0, filled] are filled; workers may be filling up to batch `filling`.
  void advance(const SampleSource& source, uint64_t filled, uint64_t filling);
  // Nothing filled yet; workers may fill up to `filling`.
  void begin(const SampleSource& source, uint64_t filling);

  struct Range {
    uint64_t first = 0;  // first sample
    uint64_t count = 0;  // samples
  };
  struct Window {
    std::vector<Range> blocks;  // storage runs, in the window's block order
    uint64_t first_batch = 0;   // first batch of this rank that holds one of its samples
    uint64_t last_batch = 0;    // last such batch
    bool visited = false;       // false: no batch of this rank (left) holds one of its samples
  };
  const std::vector<Window>& windows() const { return windows_; }

 private:
  void will_need_through(const SampleSource& source, uint64_t filling);

  std::vector<Window> windows_;
  size_t reached_ = 0;    // windows [0, reached_) are unvisited or have a batch being filled
  size_t will_need_ = 0;  // windows [0, will_need_) are advised kWillNeed (or skipped)
  size_t dont_need_ = 0;  // windows [0, dont_need_) are advised kDontNeed (or skipped)
};

}  // namespace detail
}  // namespace dscache
