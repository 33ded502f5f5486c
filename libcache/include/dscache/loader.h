// Loader: shuffled, rank-sharded, prefetched batches of NHWC uint8 images and int64 labels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dscache/direct_read.h"
#include "dscache/mixture.h"
#include "dscache/sample_source.h"
#include "dscache/sampler.h"
#include "dscache/transform.h"

namespace dscache {

// Open-time options. Per-epoch choices are start_epoch()'s arguments.
// Where the Loader's image buffers come from (one per ring slot, allocated when the Loader is
// made, released when it is destroyed). The default is aligned host memory; a trainer feeding a
// GPU supplies page-locked (pinned) memory so the host-to-device copy can run asynchronously
// straight from the batch. allocate(bytes) must return memory aligned to 64 bytes (or throw);
// release(p) gets back exactly the pointers allocate returned.
struct BufferAllocator {
  std::function<void*(size_t bytes)> allocate;
  std::function<void(void* p)> release;
};

// The most batches a Loader buffers ahead. The Loader also refuses options whose ring of
// buffers ((prefetch + 1) x batch_size x output sample bytes, plus labels and indices) exceeds
// this machine's physical memory, or whose sizes overflow 64 bits: Error(kInvalidArgument)
// naming batch_size, prefetch or the transform, never a failed allocation.
constexpr uint32_t kMaxPrefetch = 4096;
// The most worker threads a Loader starts (a thread the system refuses is Error(kIOError)).
constexpr uint32_t kMaxWorkers = 1024;

struct LoaderOptions {
  uint32_t batch_size = 256;  // samples per batch
  bool drop_last = false;     // drop this rank's last short batch
  // Serve only batches batch_offset, batch_offset + batch_stride, ... of this rank's epoch; the
  // others are never filled. batch_stride loaders with offsets 0..stride-1 (e.g. one per
  // DataLoader worker process) together serve the unstrided loader's batches, each once.
  uint32_t batch_stride = 1;   // >= 1; default 1 (every batch)
  uint32_t batch_offset = 0;   // < batch_stride; default 0
  SamplerOptions sampler;      // shuffle mode, window, rank, world size, rank tail;
                               // kWindowed with block 0: sized in stored bytes (resolve_window
                               // with source->stored_bytes() and available_memory_bytes())
  TransformOptions transform;  // crop/resize/flip of the image and, with the same draw, of
                               // every spatial field (mask, boxes); default: samples as stored
  // Fields served with each batch, by name, in this order (each must be one of the source's
  // fields(); "image", "label" and "index", the arrays every batch holds, are accepted and
  // change nothing); unset = all of the source's fields, in field order; empty = none. Fields not
  // named are never read (but the boxes a named rows_of field follows, which decide the rows it
  // keeps). Their buffers come from field_allocator, grown as batches need.
  std::optional<std::vector<std::string>> fields;
  // Boxes: a box is kept when its part inside the crop covers at least this share (0..1) of its
  // whole mapped area; 0 = any area left. Rows of a `rows_of` field follow their box.
  double min_box_visibility = 0.0;
  // Threads filling batches, 0..kMaxWorkers. 0: no threads; next() fills each batch on the
  // calling thread when it is asked for (nothing prefetched; wait_poll is not called, and the
  // fill counts as waiting), the same batches as with workers (torch's num_workers=0).
  uint32_t workers = 2;       // default 2
  uint32_t prefetch = 4;      // batches buffered ahead; 1..kMaxPrefetch (buffers = prefetch + 1)
  BufferAllocator allocator;  // image buffers; both empty = aligned host memory
  // Hand each batch's image buffer over instead of refilling it: when the next batch is taken
  // (or the epoch restarts), the Loader gives the previous batch's buffer to allocator.release
  // and its ring slot a new one from allocator.allocate, so a batch's images never change
  // afterwards; the allocator decides how long they live (Python's binding: while an array
  // holds them, then recycled). No copy; an allocation per batch (the allocator may reuse).
  // Needs an allocator. Default false: the ring's prefetch + 1 buffers are reused.
  bool hand_off_images = false;
  // Where the fields' value buffers come from (both empty: aligned host memory; the same
  // contract as allocator). With hand_off_images and an allocator here, a batch's field values
  // are handed over with its images (each field a buffer of its own, released when the next
  // batch is taken, the slot given new ones), so they never change afterwards either; their
  // row offsets stay the Loader's. Python's binding: its pool, as views (no copy per batch).
  BufferAllocator field_allocator;
  // Called by next() about every 100 ms while it waits for a batch (on the consumer thread);
  // an exception it throws leaves next() with nothing taken, the cursor unchanged. Python's
  // binding checks for Ctrl-C here. Empty: next() just waits.
  std::function<void()> wait_poll;
  // Out of core: with the kWindowed shuffle, a Cache open in MemoryMode::kPread, the raw fixed
  // layout and crop none, read each window's blocks with O_DIRECT (in file order) into the
  // Loader's own buffers, one window ahead, and copy samples from there, instead of asking the
  // page cache for the window (WILLNEED, a pread per sample, DONTNEED). Same batches, same
  // bytes. Costs direct_buffers windows of anonymous memory (the page-cache path holds as much
  // in page cache). Ignored where it does not apply, and where the file system refuses
  // O_DIRECT (tmpfs). kAuto (the default) reads directly when the path applies and the page
  // cache cannot hold the cache: its stored sample bytes > min(MemAvailable, the memory
  // cgroup's limit - usage), probed once when the Loader is made (decide_direct_read in
  // dscache/direct_read.h); a cache that fits stays in the page cache for the next epoch. kOn
  // and kOff override the rule. Loader::direct_read_reason() says what was chosen and why.
  // Measurements behind the defaults: docs/BENCHMARKS.md "Out of core, read path".
  DirectRead direct_read = DirectRead::kAuto;  // default kAuto
  uint32_t direct_buffers = 2;                 // direct_read: windows held, 2..64; default 2 (one
                                               // served, the next being read)
  uint32_t direct_depth = 4;          // direct_read: read requests in flight, 1..64; default 4
  uint32_t direct_request_kib = 512;  // direct_read: KiB per request, a multiple of 4 in
                                      // [4, 65536]; default 512
};

// One field of a batch (Batch::fields). Fixed-size kinds are stacked: `data` holds `size`
// values back to back (a mask: size x height x width elements, transformed with the image).
// Variable kinds (boxes, rows, bytes, text) are flat: `data` holds `rows` rows back to back
// and sample k's rows are [offsets[k], offsets[k + 1]); boxes are in the served image's pixels
// (after crop, resize and flip), and a rows_of field holds the rows of the boxes kept.
struct FieldBatch {
  const FieldSpec* spec = nullptr;   // the field (name, kind, dtype, shape); the source's
  const uint8_t* data = nullptr;     // little-endian elements of spec->dtype; 64-byte aligned
  uint64_t bytes = 0;                // bytes at data
  const int64_t* offsets = nullptr;  // variable kinds: size + 1 row offsets; null for fixed
  uint64_t rows = 0;                 // variable kinds: rows in the batch; fixed: size
  std::vector<uint64_t> shape;       // the array data holds, numpy-style: mask (size, H, W), scalar
                                     // (size,), array (size, *shape); variable (rows, *row shape)
};

// One batch. Its memory belongs to the Loader and is valid until the next call to next(),
// start_epoch(), restore(), resume() or the Loader's destruction (the images and field values:
// see hand_off_images and field_allocator).
struct Batch {
  uint64_t index = 0;                 // batch number within this rank's epoch (unstrided)
  uint32_t size = 0;                  // samples in the batch (< batch_size only for the last one)
  uint32_t height = 0;                // image rows
  uint32_t width = 0;                 // image columns
  uint32_t channels = 0;              // 1, 3 or 4 (RGBA)
  const uint8_t* images = nullptr;    // size*height*width*channels bytes, NHWC, 64-byte aligned
  const int64_t* labels = nullptr;    // size labels
  const uint64_t* indices = nullptr;  // size sample indices into the source (a mixture: into
                                      // the sample's own source, sources[k])
  const uint32_t* sources = nullptr;  // a mixture: size source numbers (Mixture::source(k));
                                      // null for a single source
  std::vector<FieldBatch> fields;     // LoaderOptions::fields, in that order
  // The field named `name`, or null when the batch does not carry it.
  const FieldBatch* field(const std::string& name) const;
};

// Where a rank is in its stream of batches; save it with a checkpoint, restore() to resume.
struct LoaderPosition {
  uint64_t seed = 0;    // shuffle seed
  uint64_t epoch = 0;   // epoch number
  uint64_t cursor = 0;  // batches of this epoch already returned by next() (served ones only
                        // when strided)
};

// Where all ranks together are in an epoch: the same on every rank, so a Loader of any
// world_size, batch_size and worker count continues it (elastic resume). Save it with a
// checkpoint, resume() to continue. docs/SERVING.md "Changing the number of ranks".
// A mixture's part of it (empty for a single source): enough to rebuild the epoch's order from
// any position and to continue the sources' streams (dscache/mix_order.h).
struct MixState {
  uint64_t fingerprint = 0;             // Mixture::fingerprint() of the shares in force
  uint32_t segment = 0;                 // weight changes within this epoch (MixSegment::segment)
  uint64_t segment_start = 0;           // global position where the shares in force took effect
  std::vector<uint64_t> segment_drawn;  // per source: stream position of the segment's first draw
  std::vector<uint64_t> drawn;  // per source: stream position after the `sample` samples taken
                                // (its pass: drawn / size); where new shares continue from
  std::vector<uint64_t> taken;  // per source: samples of this epoch among the `sample` taken
};

struct EpochPosition {
  uint64_t seed = 0;    // shuffle seed
  uint64_t epoch = 0;   // epoch number
  uint64_t sample = 0;  // G: samples of the epoch's global order all ranks together have taken;
                        // == epoch_length() once the epoch is finished
  MixState mix;         // a Loader over a Mixture; empty otherwise
};

// What resume() does with a position saved under other mixture shares (weights, repeats,
// epoch_samples): refuse it, or keep the samples already taken and serve the rest of the epoch
// under the new shares (docs/SERVING.md "Mixing caches", "New weights at a checkpoint").
enum class WeightChange { kRefuse, kContinue };

// The global cursor of a rank that has taken `rank_batches` batches of `batch_size` samples in
// an epoch of `n` samples under `sampler` (its world_size and tail; rank and shuffle play no
// part) and `drop_last`: rank_batches x batch_size x world_size, or n once the rank's epoch is
// finished. The same on every rank that took as many batches.
uint64_t epoch_sample(uint64_t n, const SamplerOptions& sampler, uint64_t batch_size,
                      bool drop_last, uint64_t rank_batches);
// The inverse, for a rank of this geometry: the rank batch that starts at global cursor `sample`
// (sample / (batch_size x world_size)), or the rank's batches per epoch when sample == n (or
// when the rank's epoch ends before it). Throws Error(kInvalidArgument) with the numbers when
// sample > n or sample is not a multiple of batch_size x world_size.
uint64_t rank_batch_at(uint64_t n, const SamplerOptions& sampler, uint64_t batch_size,
                       bool drop_last, uint64_t sample);
// The position where the epoch after a finished one (pos.sample == its epoch's length) starts:
// epoch + 1, sample 0, and for a mixture the sources' streams going on from where the finished
// epoch left them (segment 0 from their `drawn`), which is where a pure epoch starts only while
// the shares never changed. resume() it (kContinue under new shares) to start that epoch.
EpochPosition next_epoch_start(const EpochPosition& finished);

// With Shuffle::kWindowed the Loader tells the source (SampleSource::advise) to read the next
// window's blocks ahead as soon as a window starts being filled, and to drop a window once all
// its batches were filled: a Cache in pread mode serves caches larger than memory that way.
// Owns its worker threads and batch buffers; shares the source. One consumer thread calls
// next(); the Loader is not otherwise thread-safe. Destroying it mid-epoch stops the workers
// cleanly.
class Loader {
 public:
  // Validates the options against the source; throws Error(kInvalidArgument) naming the field.
  Loader(std::shared_ptr<const SampleSource> source, const LoaderOptions& options);
  // Serves the mixture's order (dscache/mix_order.h) over mixture->view(): batches say each
  // sample's source (Batch::sources) and index within it. Shuffle kGlobal or kNone (kWindowed is
  // refused: see docs/SERVING.md "Mixing caches"); direct_read does not apply.
  Loader(std::shared_ptr<const Mixture> mixture, const LoaderOptions& options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Starts (or restarts) an epoch; workers begin filling batches at once. Mid-epoch, the old
  // epoch's in-flight work is stopped and discarded first. The order is
  // epoch_order(source->size(), options.sampler, seed, epoch) cut into batches; images, crops
  // and flips depend only on (options, seed, epoch, sample), never on workers or timing.
  void start_epoch(uint64_t seed, uint64_t epoch);
  // Continues exactly where `pos` was taken: the remaining batches equal the uninterrupted run's
  // (even with other workers/prefetch). Throws Error(kInvalidArgument) if pos.cursor >
  // batches_per_epoch(); pos.cursor == batches_per_epoch() is an epoch already finished.
  void restore(const LoaderPosition& pos);
  // The next batch, or nullptr at the end of the epoch (again on every later call). Never
  // returns a buffer still being filled. Rethrows an Error a worker met (e.g. a corrupt
  // lazy-cache source) when that batch is due, on every call until start_epoch()/restore();
  // the cursor stays on it. Throws Error(kInvalidArgument) before the first start_epoch() or
  // restore().
  const Batch* next();

  LoaderPosition position() const;
  // The global cursor: with this Loader's next batch being rank batch c (its cursor, or the
  // rank batch it maps to when strided), G = c x batch_size x world_size, or epoch_length()
  // once the rank's epoch is finished. Meaningful as a global position when every rank took
  // the same number of batches (save at a step every rank reached). A mixture's MixState is
  // counted on from the last call: const, but not to be called from two threads at once, nor
  // while another thread is in start_epoch(), restore() or resume() (the consumer's thread).
  EpochPosition epoch_position() const;
  uint64_t epoch_sample(uint64_t rank_batches) const;  // the same formula for rank batch c
  uint64_t epoch_length() const;                       // E: the epoch's samples (the source's)
  // Continues the epoch at global sample pos.sample, whatever world_size, batch_size and
  // workers the Loader that saved it had: this Loader serves positions [G, ...) of the same
  // global order, cut for its own geometry (its rank batch G / (batch_size x world_size); the
  // first batch of its stride at or after that one when strided). Throws
  // Error(kInvalidArgument) when G > epoch_length() or when G is not a multiple of batch_size x
  // world_size (a position inside a global batch of this geometry), with the numbers.
  // A mixture: pos.mix.fingerprint must be this Loader's (else Error(kInvalidArgument) naming
  // the old and new shares) unless `change` is kContinue, which keeps [0, G) as taken and
  // serves the rest of the epoch under this Loader's shares from the sources' saved streams.
  // A MixState that is not consistent (docs/SERVING.md "Mixing caches", "Resume") is
  // Error(kInvalidArgument) naming the key; a single source's Loader refuses a non-empty one.
  void resume(const EpochPosition& pos, WeightChange change = WeightChange::kRefuse);
  // The mixture served, or null for a single source.
  const std::shared_ptr<const Mixture>& mixture() const;
  // The cursor (LoaderPosition::cursor, served batches) resume() restores for global cursor
  // `sample`; throws as resume() does.
  uint64_t cursor_at(uint64_t sample) const;
  // The sampler options in force: options.sampler with a byte-sized window resolved to block
  // and window_blocks (samples). An auto-sized window depends on this machine's free memory;
  // save these with a checkpoint (with position()) and pass them back to resume the same order
  // elsewhere.
  const SamplerOptions& sampler_options() const;
  // The options as given, with sampler as sampler_options().
  const LoaderOptions& options() const;
  uint64_t batches_per_epoch() const;  // this Loader serves (its stride's share of the rank's)
  uint64_t samples_per_epoch() const;  // for this rank, after drop_last (all strides together)
  // True when this epoch's windows are read with O_DIRECT (LoaderOptions::direct_read chose it
  // and the file system accepted it); false before the first start_epoch()/restore().
  bool reads_direct() const;
  // One line saying what LoaderOptions::direct_read chose and why, e.g. "auto: cache 1.2 GiB >
  // 290 MiB available to this process's page cache (cgroup limit)", "auto: cache 40 MiB fits in
  // 7.1 GiB available to this process's page cache (MemAvailable)", "on: not applicable
  // (O_DIRECT windows need the windowed shuffle)"; after a start where the file system refused
  // O_DIRECT, that is added.
  std::string direct_read_reason() const;
  // Seconds next() spent waiting for a batch since the last call to this (and resets it).
  double take_wait_seconds();

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace dscache
