// Fuzz target: the Loader options every Python keyword of dscache.Loader reaches (batch_size,
// drop_last, shuffle, block, window_blocks, block_bytes, window_bytes, rank, world_size,
// rank_tail, workers, prefetch, the Transform's crop, size, scale, ratio and flip), then an epoch
// and its first batches. Whatever the values, the Loader either works (batches of the promised
// shape) or refuses with dscache::Error: never a crash, a wrapped allocation size, a division by
// zero, std::bad_alloc or std::system_error.
// Input (little-endian, missing bytes read as 0): u8 cache kind (bit 0: ragged), u32 batch_size,
// u8 drop_last, u8 shuffle, u64 block, u64 window_blocks, u64 block_bytes, u64 window_bytes,
// u32 rank, u32 world_size, u8 rank_tail, u16 workers, u32 prefetch, u8 crop, u32 height,
// u32 width, 4 x f64 scale_min, scale_max, ratio_min, ratio_max, u8 flip, u64 seed, u64 epoch.
// Options whose buffers would legitimately take more than 64 MiB (yet fit in memory) are skipped:
// the target checks refusals, not the machine's memory.
// Seeds: corpus/loader_options/ (written by make_corpus.py's loader_options_seeds()).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "dscache/cache.h"
#include "dscache/loader.h"
#include "fuzz_util.h"

namespace {

using dscache::fuzz::CacheKind;

class Reader {
 public:
  Reader(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  template <typename T>
  T get() {
    T v{};
    uint8_t buf[sizeof(T)] = {};
    const size_t take = std::min(sizeof(T), n_ - pos_);
    std::memcpy(buf, d_ + pos_, take);
    pos_ += take;
    std::memcpy(&v, buf, sizeof(T));
    return v;
  }

 private:
  const uint8_t* d_;
  size_t n_;
  size_t pos_ = 0;
};

std::shared_ptr<const dscache::Cache> cache(bool ragged) {
  static dscache::fuzz::TempDir root;
  static std::shared_ptr<const dscache::Cache> caches[2] = {
      [] {
        const std::string dir = root.file("fixed");
        ::mkdir(dir.c_str(), 0755);
        dscache::fuzz::write_small_cache(dir, CacheKind::kFixed);
        return dscache::Cache::open(dir);
      }(),
      [] {
        const std::string dir = root.file("ragged");
        ::mkdir(dir.c_str(), 0755);
        dscache::fuzz::write_small_cache(dir, CacheKind::kRagged);
        return dscache::Cache::open(dir);
      }()};
  return caches[ragged ? 1 : 0];
}

uint64_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : UINT64_MAX;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader r(data, size);
  const bool ragged = r.get<uint8_t>() & 1;
  dscache::LoaderOptions o;
  o.batch_size = r.get<uint32_t>();
  o.drop_last = r.get<uint8_t>() & 1;
  o.sampler.shuffle = static_cast<dscache::Shuffle>(r.get<uint8_t>() % 3);
  o.sampler.block = r.get<uint64_t>();
  o.sampler.window_blocks = r.get<uint64_t>();
  o.sampler.block_bytes = r.get<uint64_t>();
  o.sampler.window_bytes = r.get<uint64_t>();
  o.sampler.rank = r.get<uint32_t>();
  o.sampler.world_size = r.get<uint32_t>();
  o.sampler.tail = (r.get<uint8_t>() & 1) ? dscache::RankTail::kDrop : dscache::RankTail::kPad;
  const uint16_t workers = r.get<uint16_t>();
  // Above the cap the Loader refuses; below it keep the threads few (each input starts them).
  o.workers = workers > dscache::kMaxWorkers ? workers : workers % 5;
  o.prefetch = r.get<uint32_t>();
  o.transform.crop = static_cast<dscache::CropMode>(r.get<uint8_t>() % 3);
  o.transform.height = r.get<uint32_t>();
  o.transform.width = r.get<uint32_t>();
  o.transform.scale_min = r.get<double>();
  o.transform.scale_max = r.get<double>();
  o.transform.ratio_min = r.get<double>();
  o.transform.ratio_max = r.get<double>();
  o.transform.flip = r.get<uint8_t>() & 1;
  const uint64_t seed = r.get<uint64_t>();
  const uint64_t epoch = r.get<uint64_t>();

  std::shared_ptr<const dscache::Cache> src = cache(ragged);
  // The ring the options ask for, in exact arithmetic (stored shape for a 0 size).
  const dscache::SampleShape stored = src->shape();
  // long double: exact enough for a threshold, and never wraps.
  const uint32_t h = o.transform.height ? o.transform.height : stored.height;
  const uint32_t w = o.transform.width ? o.transform.width : stored.width;
  const long double ring =
      (static_cast<long double>(o.prefetch) + 1) * o.batch_size *
      (static_cast<long double>(h) * w * std::max<uint32_t>(stored.channels, 1) + 16);
  if (o.prefetch <= dscache::kMaxPrefetch && ring > (64u << 20) &&
      ring <= static_cast<long double>(physical_memory())) {
    return 0;  // a legitimately large ring: not this target's subject
  }
  try {
    dscache::Loader loader(src, o);
    loader.start_epoch(seed, epoch);
    for (int k = 0; k < 3; ++k) {
      const dscache::Batch* b = loader.next();
      if (b == nullptr) break;
      FUZZ_CHECK(b->size >= 1 && b->size <= o.batch_size);
      FUZZ_CHECK(b->channels == stored.channels);
      FUZZ_CHECK(b->height == h && b->width == w);
      for (uint32_t i = 0; i < b->size; ++i) FUZZ_CHECK(b->indices[i] < src->size());
    }
  } catch (const dscache::Error&) {
    // refused by name: fine
  }
  return 0;
}
