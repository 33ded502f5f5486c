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
// Called concurrently from several threads.
using DecodeFn = std::function<bool(uint64_t i, uint8_t* out, std::string* reason)>;

struct LazyCacheOptions {
  uint64_t source_digest = 0;  // identifies the source + decode recipe; a file made for another
                               // digest is refused (delete it or pass another path)
  bool verify_hits = true;     // re-hash a slot on every hit (catches torn writes after a
                               // power loss; costs one XXH64 per sample)
};

// File layout (docs/FORMAT.md): header, fill bitmap, per-slot XXH64, then `count` slots of
// shape.bytes() each, preallocated. A miss decodes, writes the slot, then its checksum, then
// sets its bit; a hit is a memcpy. A process killed at any point leaves every set bit pointing
// at a complete slot. Thread-safe; several processes may share one file.
class LazyCache : public SampleSource {
 public:
  // Opens `path`, creating and preallocating it when missing. `labels` has `count` entries.
  static std::shared_ptr<LazyCache> open(const std::string& path, uint64_t count,
                                         SampleShape shape, std::vector<int64_t> labels,
                                         DecodeFn decode, const LazyCacheOptions& options = {});
  ~LazyCache() override;

  uint64_t filled() const;  // slots filled so far (this and earlier runs)
  uint64_t hits() const;    // copy_sample calls served from the file in this process
  uint64_t misses() const;  // copy_sample calls that decoded

  uint64_t size() const override;
  Layout layout() const override;  // kFixed
  SampleShape shape() const override;
  int64_t label(uint64_t i) const override;
  uint64_t locality_block() const override;
  // Hit: memcpy. Miss: decode, fill, memcpy. Throws Error(kCorruption, "", reason) when the
  // decode function fails.
  void copy_sample(uint64_t i, uint8_t* out) const override;
  ImageView view(uint64_t i) const override;  // fills the slot first if needed

  struct Impl;

 private:
  explicit LazyCache(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dscache
