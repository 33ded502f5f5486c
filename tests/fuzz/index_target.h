// The body of the two index fuzz targets (ragged-index.npy, jpeg-index.npy): a small valid
// cache of `kind` whose index file is replaced by the input (the manifest's size for it
// updated, so the input reaches the index checks), then opened and read in every way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "dscache/cache.h"
#include "fuzz_util.h"

namespace dscache::fuzz {

struct IndexBase {
  TempDir dir;
  Manifest manifest;
  bool ok = false;
};

// The valid cache of `kind`, written on the first call (from LLVMFuzzerInitialize, so its
// fsyncs do not count against the first input's timeout).
inline IndexBase* index_base(CacheKind kind) {
  static IndexBase* base = [kind] {
    auto* b = new IndexBase;
    try {
      b->manifest = write_small_cache(b->dir.path(), kind);
      b->ok = true;
      write_seed("valid-" + b->manifest.index.file,
                 read_bytes(b->dir.file(b->manifest.index.file)));
    } catch (const Error& e) {
      std::fprintf(stderr, "cannot write the base cache: %s\n", e.what());  // e.g. no JPEG
    }
    return b;
  }();
  return base;
}

inline int run_index_target(CacheKind kind, const uint8_t* data, size_t size) {
  IndexBase* base = index_base(kind);
  if (!base->ok) return 0;
  Manifest m = base->manifest;
  write_bytes(base->dir.file(m.index.file), data, size);
  m.index.bytes = size;
  const std::string json = to_json(m);
  write_bytes(base->dir.file("manifest.json"), json.data(), json.size());
  for (MemoryMode mode : {MemoryMode::kPageCache, MemoryMode::kPread}) {
    CacheOptions opt;
    opt.memory = mode;
    std::shared_ptr<Cache> cache;
    try {
      cache = Cache::open(base->dir.path(), opt);
    } catch (const Error&) {
      return 0;  // the same checks run in every mode
    }
    read_everything(*cache);
  }
  return 0;
}

}  // namespace dscache::fuzz
