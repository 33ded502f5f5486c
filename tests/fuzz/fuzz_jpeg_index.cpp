// Fuzz target: a JPEG cache's sample index (jpeg-index.npy, (count, 4) int64 rows of offset,
// length, height, width) as Cache::open checks it and the cache then decodes from it.
// Seeds: the valid index of the target's own cache (written with DSCACHE_FUZZ_SEEDS set).
#include "index_target.h"

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  dscache::fuzz::index_base(dscache::fuzz::CacheKind::kJpegRagged);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return dscache::fuzz::run_index_target(dscache::fuzz::CacheKind::kJpegRagged, data, size);
}
