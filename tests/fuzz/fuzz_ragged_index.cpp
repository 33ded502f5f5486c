// Fuzz target: a raw ragged cache's sample index (ragged-index.npy, (count, 3) int64 rows of
// offset, height, width) as Cache::open checks it and the cache then serves it.
// Seeds: the valid index of the target's own cache (written with DSCACHE_FUZZ_SEEDS set) and
// hand-made bad ones.
#include "index_target.h"

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  dscache::fuzz::index_base(dscache::fuzz::CacheKind::kRagged);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return dscache::fuzz::run_index_target(dscache::fuzz::CacheKind::kRagged, data, size);
}
