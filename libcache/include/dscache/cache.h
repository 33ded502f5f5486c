// Cache: a validated, memory-mapped, read-only view of a cache directory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dscache/enum_table.h"
#include "dscache/jpeg.h"
#include "dscache/manifest.h"
#include "dscache/sample_source.h"

namespace dscache {

// Where sample bytes live while the Cache is open.
enum class MemoryMode {
  kPageCache,  // mmap the shards; the kernel's page cache holds what was read (shared, evictable)
  kInProcess,  // copy shards into private memory, up to memory_budget; the rest stays mapped
  kPread,      // nothing mapped: copy_sample() preads each sample into the caller's buffer, so
               // serving does not depend on the page cache holding the cache (caches larger
               // than memory); view() is Unsupported; raw fixed layout and JPEG caches only
  kAuto,       // kPageCache when the shards' bytes fit in available_memory_bytes(), else kPread
               // (raw ragged caches always kPageCache). The default.
};

// How the mapped shards will be read; passed to madvise().
enum class AccessHint {
  kRandom,      // MADV_RANDOM: shuffled access, no read-ahead (default)
  kSequential,  // MADV_SEQUENTIAL: unshuffled, streaming reads
  kWillNeed,    // MADV_WILLNEED: start reading everything now
};

// "auto", "page-cache", "in-process", "pread"; "random", "sequential", "willneed" (the Python
// binding's memory= and hint= keywords).
extern const EnumTable<MemoryMode> kMemoryModeNames;
extern const EnumTable<AccessHint> kAccessHintNames;

// Open-time options. Per-epoch choices (seed, epoch) belong to the Loader.
struct CacheOptions {
  MemoryMode memory = MemoryMode::kAuto;  // see MemoryMode; default kAuto
  uint64_t memory_budget = 0;  // kInProcess: most bytes copied into private memory, 0 = all
  AccessHint hint = AccessHint::kRandom;  // madvise hint for mapped shards
  bool verify_checksums = false;  // hash every file against the manifest at open (reads it all)
  JpegDecodeOptions jpeg;  // codec jpeg: how decode_crop may save work (default: all savings on;
                           // {false, false} = full decode + crop_resize, the reference)
};

// Owns the mappings and copies; every view it returns stays valid until it is destroyed.
// Thread-safe after open(): all const methods may be called from any number of threads.
class Cache : public SampleSource {
 public:
  // Reads DIR/manifest.json and validates every file it names before mapping anything: each
  // file's size equals the manifest's, each shard's header agrees (dtype, shape, count), no
  // file is a symlink leading outside DIR. A short, altered or swapped file is
  // Error(kCorruption) naming it; it never becomes a SIGBUS later.
  static std::shared_ptr<Cache> open(const std::string& dir, const CacheOptions& options = {});
  ~Cache() override;

  const Manifest& manifest() const;
  const std::string& dir() const;
  // Bytes of sample data copied into this process (kInProcess, or compressed HDF5 shards).
  uint64_t resident_bytes() const;
  // The mode in force: options.memory, with kAuto resolved at open (kPread when streamed).
  MemoryMode memory_mode() const;
  // A remote cache larger than the local cache's budget is streamed: each shard is downloaded
  // (once per node, checked) when a read needs it or the Loader's windowed shuffle advises it
  // (advise: fetched ahead in the epoch's order, let go behind), and evicted from the local
  // cache when room is needed and nobody reads it. The bytes of the budget its shards may take
  // then (the budget less its other files); 0 for every other cache. view() is Unsupported on it
  // (copy_sample reads).
  uint64_t streaming_budget() const;

  uint64_t size() const override;
  Layout layout() const override;
  SampleShape shape() const override;
  int64_t label(uint64_t i) const override;
  // The largest shard's sample count (at least 1).
  uint64_t locality_block() const override;
  // Fixed layout: shape().bytes() bytes. Ragged: sample_shape(i).bytes() bytes. Works for every
  // shard, including chunked/compressed HDF5 (read through the HDF5 library, serialized).
  void copy_sample(uint64_t i, uint8_t* out) const override;
  // A mapped shard's sample is read with pread through a descriptor opened for the call (the
  // shard inside the directory, as at open); other shards as copy_sample() reads them.
  void copy_sample_unmapped(uint64_t i, uint8_t* out) const override;
  // A pointer into a mapping or a private copy; valid until the Cache is destroyed. Throws
  // Error(kUnsupported) for a chunked/compressed HDF5 shard that is not resident, and in kPread
  // mode (the Loader then copies samples instead).
  ImageView view(uint64_t i) const override;
  // The shards' sample bytes, all together.
  uint64_t stored_bytes() const override;
  // One pread (or memcpy) per shard the range touches; fixed and ragged layouts (JPEG caches:
  // copy_sample, i.e. a decode, per sample).
  void copy_samples(uint64_t first, uint64_t count, uint8_t* out) const override;
  // kPread mode: posix_fadvise(WILLNEED or DONTNEED) on the byte ranges of the shards that hold
  // the samples; other modes ignore it (their pages are mapped: DONTNEED could not drop them).
  // Error(kInvalidArgument) when the range passes size().
  void advise(uint64_t first, uint64_t count, Advice advice) const override;
  // Geometry of sample i: shape() for the fixed layout, the index's (h, w, C) for ragged.
  SampleShape sample_shape(uint64_t i) const override;
  // Codec kJpeg: true (see SampleSource). copy_sample() then decodes the whole sample, view()
  // throws Error(kUnsupported), and stored_sample() gives the JPEG bytes.
  bool encoded() const override;
  void decode_crop(uint64_t i, const CropBox& box, uint32_t out_h, uint32_t out_w,
                   uint8_t* out) const override;
  // The manifest's fields (docs/FORMAT.md "Fields"); empty for caches without them.
  const std::vector<FieldSpec>& fields() const override;
  // Sample i's value of field f: a view into the field file's mapping, valid while the Cache
  // lives (see SampleSource::field). Field files are always mapped (whatever the memory mode);
  // their sizes, headers and offsets were checked at open, so every view lies inside its file.
  FieldView field(uint64_t i, size_t f) const override;
  // Copies field(i, f)'s bytes to `out` (field(i, f).bytes of them) under the SIGBUS guard: a
  // field file truncated by another process while mapped is Error(kCorruption) naming it, never
  // a crash. What a caller that reads the value outside libcache should use.
  void copy_field(uint64_t i, size_t f, uint8_t* out) const;
  // The index of the field named `name` in fields(), or Error(kInvalidArgument) listing them.
  size_t field_index(const std::string& name) const;
  // Where samples [first, first + count) lie on disk, one run per shard they touch, in sample
  // order: for kPread mode's own readers (the Loader's O_DIRECT window reads). `fd` is the
  // Cache's descriptor, valid while it lives. Empty unless the cache is open in kPread mode with
  // the raw fixed layout and contiguous shards; Error(kInvalidArgument) when the range passes
  // size().
  struct StoredRun {
    int fd = -1;          // the shard's open file (read-only; do not close)
    std::string path;     // DIR/file, for messages
    uint64_t offset = 0;  // byte offset of sample `first` in the file
    uint64_t bytes = 0;   // count * sample bytes
    uint64_t first = 0;   // first sample
    uint64_t count = 0;   // samples
  };
  std::vector<StoredRun> stored_runs(uint64_t first, uint64_t count) const;
  // Sample i's bytes exactly as stored (the JPEG stream for codec kJpeg; the HWC pixels for
  // raw), which checksums.npy hashes. Replaces *out.
  void stored_sample(uint64_t i, std::vector<uint8_t>* out) const;

  struct Impl;

 private:
  explicit Cache(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// kMemoryModeNames' name: "auto", "page-cache", "in-process", "pread".
const char* to_string(MemoryMode mode);

// Memory this process may still fill without evicting its own pages: MemAvailable from
// /proc/meminfo, lowered to the room left under the process's memory cgroup limit (v2
// memory.max - memory.current, or v1 memory.limit_in_bytes - memory.usage_in_bytes) when it has
// one. What MemoryMode::kAuto compares a cache's size with.
uint64_t available_memory_bytes();

// kAuto's rule, on its own: kPageCache when `data_bytes` <= `available`, else kPread; raw
// ragged caches always kPageCache (their crops read views).
MemoryMode choose_memory_mode(uint64_t data_bytes, uint64_t available, Layout layout,
                              Codec codec = Codec::kRaw);

}  // namespace dscache
