// LazyCache: decode each sample on first use, serve it from a persistent cache file afterwards.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dscache/sample_source.h"

namespace dscache {

// Decodes sample i into `out` (shape.bytes() bytes). Returns false and sets *reason on failure.
// Called concurrently from several threads. Must be deterministic (same i, same bytes): processes
// sharing a file may fill the same slot at once, and a torn slot is refilled by decoding again.
using DecodeFn = std::function<bool(uint64_t i, uint8_t* out, std::string* reason)>;

struct LazyCacheOptions {
  uint64_t source_digest = 0;  // identifies the source + decode recipe; a file made for another
                               // digest is refused (delete it or pass another path)
  bool verify_hits = true;     // re-hash a slot on every hit (catches torn writes after a
                               // power loss; costs one XXH64 per sample)
};

// File layout (docs/FORMAT.md): header, fill bitmap, per-slot XXH64, then `count` slots of
// shape.bytes() each, sized up front. A miss decodes, writes the slot, then its checksum, then
// sets its bit; a hit is a memcpy. A process killed at any point leaves every set bit pointing
// at a complete slot. Thread-safe; several processes may share one file. Threads of one process
// never decode the same sample twice at once (they wait for each other); two processes may
// (both write the same bytes). The file is sparse: slots take disk space only once filled.
class LazyCache : public SampleSource {
 public:
  // Opens `path`, creating it (full size, sparse) when missing. `labels` has `count` entries.
  // Throws InvalidArgument (bad argument, or a file made for another count, shape or digest),
  // Corruption (damaged or wrong-size file), Unsupported (newer format version), IOError.
  static std::shared_ptr<LazyCache> open(const std::string& path, uint64_t count, SampleShape shape,
                                         std::vector<int64_t> labels, DecodeFn decode,
                                         const LazyCacheOptions& options = {});
  ~LazyCache() override;

  uint64_t filled() const;  // slots filled so far (this and earlier runs, other processes)
  uint64_t hits() const;    // copy_sample/view calls served from the file in this process
  uint64_t misses() const;  // copy_sample/view calls that decoded (incl. torn-slot refills)

  uint64_t size() const override;
  Layout layout() const override;  // kFixed
  SampleShape shape() const override;
  int64_t label(uint64_t i) const override;
  uint64_t locality_block() const override;  // samples per GiB of slots, at most size()
  // Hit: memcpy. Miss: decode, fill, memcpy. Throws Error(kCorruption, "",
  // "sample <i>: <reason>") when the decode function fails (the slot stays unfilled; the next
  // call tries again).
  void copy_sample(uint64_t i, uint8_t* out) const override;
  // Fills the slot first if needed; the pointer is into the mapped file, valid while this lives.
  ImageView view(uint64_t i) const override;

  struct Impl;

 private:
  explicit LazyCache(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dscache
