// What a Loader reads samples from: a built Cache or a LazyCache.
#pragma once

#include <cstdint>

#include <vector>

#include "dscache/fields.h"
#include "dscache/manifest.h"
#include "dscache/shard.h"

namespace dscache {

struct CropBox;  // transform.h

// One sample in place. `data` points at height*width*channels bytes, HWC, row-major; it stays
// valid while the object that returned it lives.
struct ImageView {
  const uint8_t* data = nullptr;  // first byte of the sample
  uint32_t height = 0;            // rows
  uint32_t width = 0;             // columns
  uint32_t channels = 0;          // 1, 3 or 4 (RGBA)
  int64_t label = 0;              // class index
};

// IO hints a reader gives the source about sample ranges it will read soon or is done with.
enum class Advice {
  kWillNeed,  // will be read soon: start reading (POSIX_FADV_WILLNEED)
  kDontNeed,  // done for now: drop from the page cache (POSIX_FADV_DONTNEED)
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

  // Copies sample i's pixels (sample_shape(i).bytes() bytes; decoded when the source is
  // encoded) into `out`. Every source supports the fixed layout; a Cache also the ragged one.
  // Throws Error.
  virtual void copy_sample(uint64_t i, uint8_t* out) const = 0;
  // The same bytes as copy_sample(), for a one-off pass over a few samples spread over the whole
  // source (the trainer's normalization statistics): a mapped source reads them with pread
  // instead of touching its mapping, whose page faults map the pages around each sample too
  // (fault-around, large folios), so that a pass over every 12th sample would bring the whole
  // cache into the process's RSS. Default: copy_sample().
  virtual void copy_sample_unmapped(uint64_t i, uint8_t* out) const { copy_sample(i, out); }
  // Any layout: sample i in place, when the source can hand out a stable pointer (mapped or
  // resident data). Throws Error(kUnsupported) otherwise (e.g. compressed HDF5).
  virtual ImageView view(uint64_t i) const = 0;

  // True when samples are stored encoded (a JPEG cache): view() is then Unsupported and the
  // Loader calls decode_crop(), which decodes only what the crop needs.
  virtual bool encoded() const { return false; }
  // Geometry of sample i as decoded (from the cache's index; nothing is decoded). Every source
  // answers; the default is shape() (fixed-layout sources).
  virtual SampleShape sample_shape(uint64_t i) const;
  // Encoded sources: `box` of sample i (in its full-size pixels) resized to out_h x out_w x C at
  // `out`, mirrored when box.flip — within docs/FORMAT.md's tolerance of decoding it whole and
  // calling crop_resize. A corrupt sample is Error(kCorruption) naming the shard and the sample.
  // The default throws Error(kUnsupported).
  virtual void decode_crop(uint64_t i, const CropBox& box, uint32_t out_h, uint32_t out_w,
                           uint8_t* out) const;

  // Fields (docs/FORMAT.md "Fields"): the named values each sample carries besides its image and
  // label, in field order. Default: none.
  virtual const std::vector<FieldSpec>& fields() const;
  // Sample i's value of field f (< fields().size()) as stored: a view valid while the source
  // lives. A mask has rows = sample_shape(i).height * width elements (one channel). Mapped
  // memory: read it through a guarded copy where a truncated file must not be a SIGBUS (the
  // Loader does). Default: Error(kUnsupported).
  virtual FieldView field(uint64_t i, size_t f) const;

  // Out-of-core helpers, with defaults that suit any source.
  // Bytes the samples occupy in storage, all together (what a byte-sized window is measured
  // in). Default: size() * shape().bytes() for the fixed layout, 0 (unknown) otherwise.
  virtual uint64_t stored_bytes() const {
    return layout() == Layout::kFixed ? size() * shape().bytes() : 0;
  }
  // Fixed layout: copies samples [first, first + count) into `out`, back to back. A source that
  // stores them contiguously can do it with one read. Default: copy_sample for each.
  virtual void copy_samples(uint64_t first, uint64_t count, uint8_t* out) const {
    const uint64_t bytes = shape().bytes();
    for (uint64_t k = 0; k < count; ++k) copy_sample(first + k, out + k * bytes);
  }
  // A hint about samples [first, first + count): nothing is promised, reads stay correct
  // whatever is advised. Default: ignored (a Cache in pread mode passes it to posix_fadvise).
  virtual void advise(uint64_t /*first*/, uint64_t /*count*/, Advice /*advice*/) const {}
};

}  // namespace dscache
