// What a Loader reads samples from: a built Cache or a LazyCache.
#pragma once

#include <cstdint>

#include "dscache/manifest.h"
#include "dscache/shard.h"

namespace dscache {

// One sample in place. `data` points at height*width*channels bytes, HWC, row-major; it stays
// valid while the object that returned it lives.
struct ImageView {
  const uint8_t* data = nullptr;  // first byte of the sample
  uint32_t height = 0;            // rows
  uint32_t width = 0;             // columns
  uint32_t channels = 0;          // 1 or 3
  int64_t label = 0;              // class index
};

// Implementations are thread-safe: any number of threads may call every method concurrently.
class SampleSource {
 public:
  virtual ~SampleSource() = default;

  virtual uint64_t size() const = 0;      // number of samples
  virtual Layout layout() const = 0;      // kFixed: every sample has shape(); kRagged: varies
  virtual SampleShape shape() const = 0;  // kFixed: the sample shape; kRagged: (0, 0, C)
  virtual int64_t label(uint64_t i) const = 0;
  // Samples stored next to each other come in runs of this many (a shard's worth for a built
  // cache); the windowed shuffle keeps its reads inside a few such runs.
  virtual uint64_t locality_block() const = 0;

  // Fixed layout: copies sample i (shape().bytes() bytes) into `out`. Throws Error.
  virtual void copy_sample(uint64_t i, uint8_t* out) const = 0;
  // Any layout: sample i in place, when the source can hand out a stable pointer (mapped or
  // resident data). Throws Error(kUnsupported) otherwise (e.g. compressed HDF5).
  virtual ImageView view(uint64_t i) const = 0;
};

}  // namespace dscache
