// Loader: batches from real caches (npy/HDF5, fixed/ragged) — contents, order, determinism
// across workers/prefetch, rank sharding, drop_last, resume, restarts, errors, shutdown.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "dscache/cache.h"
#include "dscache/error.h"
#include "dscache/loader.h"
#include "dscache/manifest.h"
#include "dscache/sampler.h"
#include "dscache/shard.h"
#include "dscache/transform.h"
#include "test_util.h"

namespace {

using dscache::Batch;
using dscache::Cache;
using dscache::CropMode;
using dscache::Error;
using dscache::ErrorKind;
using dscache::ImageView;
using dscache::Layout;
using dscache::Loader;
using dscache::LoaderOptions;
using dscache::LoaderPosition;
using dscache::RankTail;
using dscache::SampleShape;
using dscache::SampleSource;
using dscache::Shuffle;
using dscache::Storage;

using namespace dscache::test;

// What to build: by default 20 + 20 + 13 samples of 6x5x3 (ragged: 4..15 x 4..15) in classes
// a..d.
struct Spec : CacheSpec {
  Spec() {
    shard_counts = {20, 20, 13};
    height = 6;
    width = 5;
    classes = {"a", "b", "c", "d"};
    ragged_min_side = 4;
    ragged_max_side = 15;
  }
};

// A cache on disk, opened, plus what each sample holds.
struct Built : WrittenCache {
  std::shared_ptr<Cache> cache;
};

// Writes a complete cache with the library's own writers and opens it.
Built build_cache(const std::string& dir, const Spec& spec) {
  Built out;
  static_cast<WrittenCache&>(out) = write_test_cache(dir, spec);
  out.cache = Cache::open(dir);
  return out;
}

// One batch, copied out of the Loader's buffers.
struct Taken {
  uint64_t index = 0;
  uint32_t size = 0, height = 0, width = 0, channels = 0;
  std::vector<uint8_t> images;
  std::vector<int64_t> labels;
  std::vector<uint64_t> indices;
  bool operator==(const Taken& o) const {
    return index == o.index && size == o.size && height == o.height && width == o.width &&
           channels == o.channels && images == o.images && labels == o.labels &&
           indices == o.indices;
  }
};

Taken copy_of(const Batch& b) {
  Taken t;
  t.index = b.index;
  t.size = b.size;
  t.height = b.height;
  t.width = b.width;
  t.channels = b.channels;
  t.images.assign(b.images, b.images + size_t{b.size} * b.height * b.width * b.channels);
  t.labels.assign(b.labels, b.labels + b.size);
  t.indices.assign(b.indices, b.indices + b.size);
  return t;
}

// The rest of the epoch: at most `limit` batches.
std::vector<Taken> drain(Loader& loader, size_t limit = SIZE_MAX) {
  std::vector<Taken> out;
  while (out.size() < limit) {
    const Batch* b = loader.next();
    if (b == nullptr) break;
    out.push_back(copy_of(*b));
  }
  return out;
}

std::vector<uint64_t> all_indices(const std::vector<Taken>& batches) {
  std::vector<uint64_t> v;
  for (const Taken& t : batches) v.insert(v.end(), t.indices.begin(), t.indices.end());
  return v;
}

LoaderOptions small_options(uint32_t batch_size = 8) {
  LoaderOptions o;
  o.batch_size = batch_size;
  o.workers = 2;
  o.prefetch = 2;
  return o;
}

std::string ctor_message(std::shared_ptr<const SampleSource> source, const LoaderOptions& o) {
  return invalid_argument_message([&] { Loader loader(std::move(source), o); });
}

// Delegates to a cache; copy_sample and view of one index throw, like a corrupt lazy cache.
class FailingSource : public SampleSource {
 public:
  FailingSource(std::shared_ptr<const SampleSource> inner, uint64_t bad)
      : inner_(std::move(inner)), bad_(bad) {}
  uint64_t size() const override { return inner_->size(); }
  Layout layout() const override { return inner_->layout(); }
  SampleShape shape() const override { return inner_->shape(); }
  int64_t label(uint64_t i) const override { return inner_->label(i); }
  uint64_t locality_block() const override { return inner_->locality_block(); }
  void copy_sample(uint64_t i, uint8_t* out) const override {
    if (i == bad_) throw Error(ErrorKind::kCorruption, "cache.bin", "slot " + std::to_string(i));
    inner_->copy_sample(i, out);
  }
  ImageView view(uint64_t i) const override {
    if (i == bad_) throw Error(ErrorKind::kCorruption, "cache.bin", "slot " + std::to_string(i));
    return inner_->view(i);
  }

 private:
  std::shared_ptr<const SampleSource> inner_;
  uint64_t bad_;
};

// Delegates to a cache and records copy_samples runs and advise calls.
class CountingSource : public SampleSource {
 public:
  struct Call {
    uint64_t first, count;
    dscache::Advice advice;
  };
  explicit CountingSource(std::shared_ptr<const SampleSource> inner) : inner_(std::move(inner)) {}
  uint64_t size() const override { return inner_->size(); }
  Layout layout() const override { return inner_->layout(); }
  SampleShape shape() const override { return inner_->shape(); }
  int64_t label(uint64_t i) const override { return inner_->label(i); }
  uint64_t locality_block() const override { return inner_->locality_block(); }
  void copy_sample(uint64_t i, uint8_t* out) const override { inner_->copy_sample(i, out); }
  ImageView view(uint64_t i) const override { return inner_->view(i); }
  uint64_t stored_bytes() const override { return inner_->stored_bytes(); }
  void copy_samples(uint64_t first, uint64_t count, uint8_t* out) const override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      runs_.push_back(count);
    }
    inner_->copy_samples(first, count, out);
  }
  void advise(uint64_t first, uint64_t count, dscache::Advice a) const override {
    std::lock_guard<std::mutex> lock(mu_);
    advice_.push_back(Call{first, count, a});
  }
  std::vector<Call> advice() const {
    std::lock_guard<std::mutex> lock(mu_);
    return advice_;
  }
  std::vector<uint64_t> runs() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<uint64_t> r = runs_;
    std::sort(r.begin(), r.end(), std::greater<uint64_t>());
    return r;
  }

 private:
  std::shared_ptr<const SampleSource> inner_;
  mutable std::mutex mu_;
  mutable std::vector<Call> advice_;
  mutable std::vector<uint64_t> runs_;
};

}  // namespace

TEST_SUITE("loader") {
  TEST_CASE("every batch holds the samples and labels of its indices, in epoch order") {
    for (Storage storage : storages()) {
      for (uint32_t channels : {1u, 3u}) {
        TempDir dir;
        Spec spec;
        spec.storage = storage;
        spec.channels = channels;
        const Built built = build_cache(dir.path(), spec);
        const uint64_t n = built.samples.size();
        for (uint32_t bs : {1u, 7u, 8u, 53u, 100u}) {
          CAPTURE(dscache::to_string(storage));
          CAPTURE(bs);
          LoaderOptions o = small_options(bs);
          Loader loader(built.cache, o);
          CHECK(loader.batches_per_epoch() == (n + bs - 1) / bs);
          CHECK(loader.samples_per_epoch() == n);
          loader.start_epoch(17, 4);
          const auto batches = drain(loader);
          REQUIRE(batches.size() == loader.batches_per_epoch());
          for (size_t k = 0; k < batches.size(); ++k) {
            const Taken& t = batches[k];
            CHECK(t.index == k);
            CHECK(t.size == std::min<uint64_t>(bs, n - k * bs));
            CHECK(t.height == spec.height);
            CHECK(t.width == spec.width);
            CHECK(t.channels == channels);
            const size_t bytes = size_t{spec.height} * spec.width * channels;
            for (uint32_t j = 0; j < t.size; ++j) {
              const uint64_t i = t.indices[j];
              REQUIRE(i < n);
              CHECK(t.labels[j] == built.labels[i]);
              CHECK(std::memcmp(t.images.data() + j * bytes, built.samples[i].data(), bytes) == 0);
            }
          }
          // One epoch visits every sample once, in epoch_order's order.
          const auto order = all_indices(batches);
          CHECK(order == dscache::epoch_order(n, o.sampler, 17, 4));
          std::vector<uint64_t> sorted = order;
          std::sort(sorted.begin(), sorted.end());
          std::vector<uint64_t> iota(n);
          std::iota(iota.begin(), iota.end(), uint64_t{0});
          CHECK(sorted == iota);
        }
      }
    }
  }

  TEST_CASE("windowed shuffle with block 0 sizes its block and window in stored bytes") {
    TempDir dir;
    const Built built = build_cache(dir.path(), Spec{});  // shards of 20, 20, 13; 90-byte samples
    const uint64_t n = built.samples.size();
    LoaderOptions o = small_options(10);
    o.sampler.shuffle = Shuffle::kWindowed;
    o.sampler.block_bytes = 20 * 90;
    o.sampler.window_bytes = 20 * 90 + 89;  // one block and a bit: rounded down to one block
    Loader loader(built.cache, o);
    const dscache::SamplerOptions& in_force = loader.sampler_options();
    CHECK(in_force.block == 20);
    CHECK(in_force.window_blocks == 1);
    CHECK(in_force.window_bytes == 20 * 90);
    loader.start_epoch(2, 7);
    const auto order = all_indices(drain(loader));
    CHECK(order == dscache::epoch_order(n, in_force, 2, 7));
    // One block per window: each block's samples come out together.
    size_t pos = 0;
    while (pos < order.size()) {
      const uint64_t block = order[pos] / 20;
      const size_t len = block == 2 ? 13 : 20;
      for (size_t k = pos; k < pos + len; ++k) CHECK(order[k] / 20 == block);
      pos += len;
    }
    // Defaults: 4 MiB blocks hold the whole (tiny) cache; an explicit block is kept as given.
    o.sampler.block_bytes = 0;
    o.sampler.window_bytes = 0;
    CHECK(Loader(built.cache, o).sampler_options().block == n);
    o.sampler.block = 7;
    o.sampler.window_blocks = 3;
    const Loader explicit_block(built.cache, o);
    CHECK(explicit_block.sampler_options().block == 7);
    CHECK(explicit_block.sampler_options().window_blocks == 3);
  }

  TEST_CASE(
      "byte-sized windows: restore() resumes exactly, in pread mode too, from the saved "
      "options") {
    TempDir dir;
    Spec spec;
    spec.shard_counts = {30, 30, 37};
    const Built built = build_cache(dir.path(), spec);
    dscache::CacheOptions po;
    po.memory = dscache::MemoryMode::kPread;
    const auto pread = Cache::open(dir.path(), po);
    for (uint32_t rank : {0u, 1u}) {
      CAPTURE(rank);
      LoaderOptions o = small_options(6);
      o.sampler.shuffle = Shuffle::kWindowed;
      o.sampler.block_bytes = 5 * 90;
      o.sampler.window_bytes = 2 * 5 * 90;
      o.sampler.rank = rank;
      o.sampler.world_size = 2;
      o.transform.flip = true;
      Loader full(built.cache, o);
      full.start_epoch(8, 3);
      const auto all = drain(full);
      REQUIRE(all.size() == 9);  // ceil(97 / 2) = 49 samples, batches of 6
      for (size_t k : {size_t{0}, size_t{1}, size_t{4}, size_t{8}, size_t{9}}) {
        CAPTURE(k);
        Loader first(built.cache, o);
        first.start_epoch(8, 3);
        const auto head = drain(first, k);
        const LoaderPosition pos = first.position();
        // A resumed job passes the saved, resolved options (explicit block and window).
        LoaderOptions other = o;
        other.sampler = first.sampler_options();
        other.sampler.block_bytes = 1;  // ignored: the block is explicit now
        other.sampler.window_bytes = 1;
        other.workers = 3;
        other.prefetch = 1;
        for (const auto& source : {built.cache, pread}) {
          Loader second(source, other);
          second.restore(pos);
          const auto tail = drain(second);
          REQUIRE(tail.size() == all.size() - k);
          for (size_t j = 0; j < tail.size(); ++j) CHECK(tail[j] == all[k + j]);
        }
        for (size_t j = 0; j < head.size(); ++j) CHECK(head[j] == all[j]);
      }
    }
  }

  TEST_CASE("a cache open in pread mode yields the same windowed batches as a mapped one") {
    for (const Storage storage : storages()) {
      TempDir dir;
      Spec spec;
      spec.storage = storage;
      spec.shard_counts = {30, 30, 37};
      const Built built = build_cache(dir.path(), spec);
      dscache::CacheOptions po;
      po.memory = dscache::MemoryMode::kPread;
      const auto pread = Cache::open(dir.path(), po);
      for (uint32_t window_blocks : {1u, 3u}) {
        LoaderOptions o = small_options(10);
        o.sampler.shuffle = Shuffle::kWindowed;
        o.sampler.block_bytes = 8 * 90;
        o.sampler.window_bytes = window_blocks * 8 * 90;
        o.transform.flip = true;
        Loader mapped(built.cache, o), read(pread, o);
        CHECK(read.sampler_options().window_blocks == window_blocks);
        for (uint64_t epoch : {0, 1}) {
          mapped.start_epoch(5, epoch);
          read.start_epoch(5, epoch);
          const auto want = drain(mapped);
          CHECK(want.size() == 10);
          CHECK(drain(read) == want);
        }
      }
    }
  }

  TEST_CASE("the windowed Loader advises whole windows: ahead before reading, behind after") {
    TempDir dir;
    Spec spec;
    spec.shard_counts = {30, 30, 37};
    const Built built = build_cache(dir.path(), spec);
    const uint64_t n = built.samples.size();
    for (uint32_t world : {1u, 2u}) {
      CAPTURE(world);
      auto source = std::make_shared<CountingSource>(built.cache);
      LoaderOptions o = small_options(4);
      o.sampler.shuffle = Shuffle::kWindowed;
      o.sampler.block_bytes = 5 * 90;
      o.sampler.window_bytes = 2 * 5 * 90;  // windows of 10 samples: several batches each
      o.sampler.world_size = world;
      o.sampler.tail = RankTail::kDrop;
      Loader loader(source, o);
      loader.start_epoch(3, 1);
      // calls_at[c]: advice calls made before batch c was returned.
      std::vector<size_t> calls_at;
      std::vector<Taken> batches;
      while (true) {
        calls_at.push_back(source->advice().size());
        const Batch* b = loader.next();
        if (b == nullptr) break;
        batches.push_back(copy_of(*b));
      }
      const auto log = source->advice();
      std::vector<int> will(n, -1), dont(n, -1);  // call index of each sample's hint
      for (size_t c = 0; c < log.size(); ++c) {
        const CountingSource::Call& call = log[c];
        REQUIRE(call.count > 0);
        REQUIRE(call.first + call.count <= n);
        for (uint64_t i = call.first; i < call.first + call.count; ++i) {
          int& slot = call.advice == dscache::Advice::kWillNeed ? will[i] : dont[i];
          CHECK(slot == -1);  // each sample once per epoch
          slot = static_cast<int>(c);
        }
      }
      // Every sample this rank served was read ahead before its batch was returned, and
      // dropped only after it: never before a batch that holds it.
      for (size_t k = 0; k < batches.size(); ++k) {
        for (uint64_t i : batches[k].indices) {
          CAPTURE(i);
          REQUIRE(will[i] >= 0);
          CHECK(static_cast<size_t>(will[i]) < calls_at[k]);
          REQUIRE(dont[i] >= 0);
          CHECK(static_cast<size_t>(dont[i]) >= calls_at[k]);
          CHECK(will[i] < dont[i]);
        }
      }
      // Ahead means at most the windows in the workers' hands and one more, never everything at
      // once: after batch c, batches c..c+3 (prefetch 2 + 1 slots, and c) hold 16 of this
      // rank's positions = 16*world global ones, touching at most 16*world/10 + 2 windows of 10.
      size_t pending_max = 0;
      for (size_t k = 0; k + 1 < calls_at.size(); ++k) {
        std::set<uint64_t> pending;
        for (size_t c = 0; c < calls_at[k + 1]; ++c) {
          const CountingSource::Call& call = log[c];
          for (uint64_t i = call.first; i < call.first + call.count; ++i) {
            if (call.advice == dscache::Advice::kWillNeed) {
              pending.insert(i);
            } else {
              pending.erase(i);
            }
          }
        }
        pending_max = std::max(pending_max, pending.size());
      }
      CHECK(pending_max > 0);
      CHECK(pending_max <= (16 * world / 10 + 3) * 10);
      CHECK(pending_max < n);
      // The epoch's batches are still right.
      for (const Taken& t : batches) {
        for (uint32_t j = 0; j < t.size; ++j) {
          CHECK(std::memcmp(t.images.data() + j * 90, built.samples[t.indices[j]].data(), 90) == 0);
        }
      }
    }
    // Other shuffles give no hints.
    auto source = std::make_shared<CountingSource>(built.cache);
    LoaderOptions o = small_options(4);
    Loader loader(source, o);
    loader.start_epoch(3, 1);
    drain(loader);
    CHECK(source->advice().empty());
  }

  TEST_CASE("adjacent indices in a batch are copied with one copy_samples call") {
    TempDir dir;
    Spec spec;
    spec.shard_counts = {30, 30, 37};
    const Built built = build_cache(dir.path(), spec);
    auto source = std::make_shared<CountingSource>(built.cache);
    LoaderOptions o = small_options(10);
    o.sampler.shuffle = Shuffle::kNone;
    Loader loader(source, o);
    loader.start_epoch(0, 0);
    const auto batches = drain(loader);
    REQUIRE(batches.size() == 10);
    // Storage order: each batch is one run (shard boundaries are the source's business).
    CHECK(source->runs() == std::vector<uint64_t>{10, 10, 10, 10, 10, 10, 10, 10, 10, 7});
    for (const Taken& t : batches) {
      for (uint32_t j = 0; j < t.size; ++j) {
        CHECK(std::memcmp(t.images.data() + j * 90, built.samples[t.indices[j]].data(), 90) == 0);
      }
    }
  }

  TEST_CASE("batch memory is 64-byte aligned and stable across epochs") {
    TempDir dir;
    const Built built = build_cache(dir.path(), Spec{});
    Loader loader(built.cache, small_options(5));
    std::set<const uint8_t*> buffers;
    for (uint64_t epoch = 0; epoch < 3; ++epoch) {
      loader.start_epoch(1, epoch);
      while (const Batch* b = loader.next()) {
        CHECK(reinterpret_cast<uintptr_t>(b->images) % 64 == 0);
        buffers.insert(b->images);
      }
    }
    CHECK(buffers.size() <= 3);  // prefetch 2 + 1 slots, reused every epoch
  }

  TEST_CASE("a BufferAllocator supplies every image buffer and gets each back once") {
    TempDir dir;
    const Built built = build_cache(dir.path(), Spec{});
    struct Region {
      uint8_t* base;
      size_t bytes;
    };
    std::vector<Region> live;
    size_t allocated = 0, released = 0;
    LoaderOptions o = small_options(5);  // prefetch 2: 3 slots
    o.allocator.allocate = [&](size_t bytes) {
      void* p = std::aligned_alloc(128, (bytes + 127) / 128 * 128);
      live.push_back({static_cast<uint8_t*>(p), bytes});
      ++allocated;
      return p;
    };
    o.allocator.release = [&](void* p) {
      auto it =
          std::find_if(live.begin(), live.end(), [&](const Region& r) { return r.base == p; });
      REQUIRE(it != live.end());  // only what allocate returned, and only once
      live.erase(it);
      std::free(p);
      ++released;
    };
    std::vector<Taken> with_allocator;
    {
      Loader loader(built.cache, o);
      CHECK(allocated == 3);
      loader.start_epoch(4, 0);
      while (const Batch* b = loader.next()) {
        const size_t n = size_t{b->size} * b->height * b->width * b->channels;
        const bool inside = std::any_of(live.begin(), live.end(), [&](const Region& r) {
          return b->images >= r.base && b->images + n <= r.base + r.bytes;
        });
        CHECK(inside);
        with_allocator.push_back(copy_of(*b));
      }
    }
    CHECK(released == 3);
    CHECK(live.empty());
    // The same batches as with the Loader's own buffers.
    Loader plain(built.cache, small_options(5));
    plain.start_epoch(4, 0);
    CHECK(drain(plain) == with_allocator);

    // Misaligned memory and half an allocator are refused, naming the field; nothing leaks.
    LoaderOptions bad = small_options(5);
    std::vector<void*> owned;
    bad.allocator.allocate = [&](size_t bytes) {
      owned.push_back(std::malloc(bytes + 64));
      return static_cast<uint8_t*>(owned.back()) + 1;
    };
    bad.allocator.release = [&](void* p) {
      auto it = std::find(owned.begin(), owned.end(), static_cast<uint8_t*>(p) - 1);
      REQUIRE(it != owned.end());
      std::free(*it);
      owned.erase(it);
    };
    CHECK(ctor_message(built.cache, bad).find("loader.allocator returned memory not aligned") !=
          std::string::npos);
    CHECK(owned.empty());
    LoaderOptions half = small_options(5);
    half.allocator.allocate = [](size_t bytes) { return std::aligned_alloc(64, bytes); };
    CHECK(ctor_message(built.cache, half).find("loader.allocator needs both") != std::string::npos);
  }

  TEST_CASE("contents and order do not depend on workers or prefetch") {
    TempDir dir;
    Spec spec;
    spec.shard_counts = {30, 30, 37};
    const Built built = build_cache(dir.path(), spec);
    struct Mode {
      Shuffle shuffle;
      CropMode crop;
    };
    const Mode modes[] = {{Shuffle::kGlobal, CropMode::kNone},
                          {Shuffle::kWindowed, CropMode::kRandomResized},
                          {Shuffle::kNone, CropMode::kCenter}};
    for (const Mode& mode : modes) {
      std::vector<Taken> reference;
      bool first = true;
      for (uint32_t workers : {1u, 2u, 4u}) {
        for (uint32_t prefetch : {1u, 3u}) {
          CAPTURE(workers);
          CAPTURE(prefetch);
          LoaderOptions o = small_options(10);
          o.workers = workers;
          o.prefetch = prefetch;
          o.sampler.shuffle = mode.shuffle;
          o.sampler.block = 20;
          o.sampler.window_blocks = 2;
          o.transform.crop = mode.crop;
          o.transform.flip = true;
          if (mode.crop != CropMode::kNone) {
            o.transform.height = 4;
            o.transform.width = 4;
          }
          Loader loader(built.cache, o);
          loader.start_epoch(99, 2);
          auto batches = drain(loader);
          CHECK(batches.size() == 10);
          if (first) {
            reference = std::move(batches);
            first = false;
          } else {
            CHECK(batches == reference);
          }
        }
      }
    }
  }

  TEST_CASE("a cache open in pread mode yields the same batches as a mapped one") {
    for (const Storage storage : storages()) {
      TempDir dir;
      Spec spec;
      spec.storage = storage;
      spec.shard_counts = {30, 30, 37};
      const Built built = build_cache(dir.path(), spec);
      dscache::CacheOptions po;
      po.memory = dscache::MemoryMode::kPread;
      const auto pread = Cache::open(dir.path(), po);
      REQUIRE(pread->memory_mode() == dscache::MemoryMode::kPread);
      for (const CropMode crop : {CropMode::kNone, CropMode::kCenter, CropMode::kRandomResized}) {
        LoaderOptions o = small_options(10);
        o.workers = 2;
        o.sampler.shuffle = Shuffle::kGlobal;
        o.transform.crop = crop;
        o.transform.flip = true;
        if (crop != CropMode::kNone) {
          o.transform.height = 4;
          o.transform.width = 4;
        }
        Loader mapped(built.cache, o), read(pread, o);
        mapped.start_epoch(5, 1);
        read.start_epoch(5, 1);
        const auto want = drain(mapped);
        CHECK(want.size() == 10);
        CHECK(drain(read) == want);
      }
    }
  }

  TEST_CASE("crop none with flip serves each sample as stored or mirrored, as choose_crop says") {
    TempDir dir;
    const Built built = build_cache(dir.path(), Spec{});
    LoaderOptions o = small_options(16);
    o.transform.flip = true;
    Loader loader(built.cache, o);
    loader.start_epoch(3, 0);
    int flipped = 0, total = 0;
    const uint32_t h = 6, w = 5, c = 3;
    for (const Taken& t : drain(loader)) {
      for (uint32_t j = 0; j < t.size; ++j) {
        const uint64_t i = t.indices[j];
        const bool flip = dscache::choose_crop(o.transform, h, w, 3, 0, i).flip;
        flipped += flip;
        ++total;
        const uint8_t* img = t.images.data() + size_t{j} * h * w * c;
        bool same = true;
        for (uint32_t y = 0; y < h; ++y) {
          for (uint32_t x = 0; x < w; ++x) {
            const uint32_t sx = flip ? w - 1 - x : x;
            for (uint32_t k = 0; k < c; ++k) {
              same &= img[(y * w + x) * c + k] == built.samples[i][(y * w + sx) * c + k];
            }
          }
        }
        CHECK(same);
      }
    }
    CHECK(flipped > 0);
    CHECK(flipped < total);
  }

  TEST_CASE("drop_last and batch counts") {
    struct Case {
      std::vector<uint64_t> shards;
      uint32_t batch_size;
      bool drop_last;
      uint64_t batches, samples, last_size;
    };
    const Case cases[] = {
        {{10, 10, 5}, 8, false, 4, 25, 1}, {{10, 10, 5}, 8, true, 3, 24, 8},
        {{8, 8}, 8, true, 2, 16, 8},       {{8, 8}, 8, false, 2, 16, 8},
        {{5}, 8, true, 0, 0, 0},           {{5}, 8, false, 1, 5, 5},
    };
    for (const Case& c : cases) {
      CAPTURE(c.batch_size);
      CAPTURE(c.drop_last);
      TempDir dir;
      Spec spec;
      spec.shard_counts = c.shards;
      const Built built = build_cache(dir.path(), spec);
      LoaderOptions o = small_options(c.batch_size);
      o.drop_last = c.drop_last;
      Loader loader(built.cache, o);
      CHECK(loader.batches_per_epoch() == c.batches);
      CHECK(loader.samples_per_epoch() == c.samples);
      loader.start_epoch(0, 0);
      const auto batches = drain(loader);
      REQUIRE(batches.size() == c.batches);
      CHECK(all_indices(batches).size() == c.samples);
      if (!batches.empty()) CHECK(batches.back().size == c.last_size);
    }
  }

  TEST_CASE("ranks: equal batch counts, kDrop disjoint, kPad covers every sample") {
    TempDir dir;
    Spec spec;
    spec.shard_counts = {20, 20, 13};  // 53 samples: divides by no world size below
    const Built built = build_cache(dir.path(), spec);
    for (RankTail tail : {RankTail::kPad, RankTail::kDrop}) {
      for (uint32_t world : {1u, 2u, 3u, 4u}) {
        for (bool drop_last : {false, true}) {
          CAPTURE(world);
          CAPTURE(drop_last);
          std::vector<uint64_t> counts;
          std::vector<uint64_t> seen;
          for (uint32_t rank = 0; rank < world; ++rank) {
            LoaderOptions o = small_options(4);
            o.drop_last = drop_last;
            o.sampler.world_size = world;
            o.sampler.rank = rank;
            o.sampler.tail = tail;
            Loader loader(built.cache, o);
            loader.start_epoch(5, 1);
            const auto batches = drain(loader);
            CHECK(batches.size() == loader.batches_per_epoch());
            counts.push_back(batches.size());
            const auto mine = all_indices(batches);
            CHECK(mine.size() == loader.samples_per_epoch());
            seen.insert(seen.end(), mine.begin(), mine.end());
          }
          for (uint64_t c : counts) CHECK(c == counts[0]);
          std::set<uint64_t> distinct(seen.begin(), seen.end());
          if (tail == RankTail::kDrop) CHECK(distinct.size() == seen.size());
          if (tail == RankTail::kPad && !drop_last) CHECK(distinct.size() == 53);
        }
      }
    }
  }

  TEST_CASE("resume: restore() yields exactly the rest of the uninterrupted epoch") {
    for (Storage storage : storages()) {
      TempDir dir;
      Spec spec;
      spec.storage = storage;
      const Built built = build_cache(dir.path(), spec);
      for (CropMode crop : {CropMode::kNone, CropMode::kRandomResized}) {
        LoaderOptions o = small_options(6);
        o.transform.crop = crop;
        o.transform.flip = true;
        if (crop != CropMode::kNone) {
          o.transform.height = 3;
          o.transform.width = 4;
        }
        Loader full(built.cache, o);
        full.start_epoch(8, 3);
        const auto all = drain(full);
        REQUIRE(all.size() == 9);
        for (size_t k : {size_t{0}, size_t{1}, size_t{4}, size_t{8}, size_t{9}}) {
          CAPTURE(k);
          Loader first(built.cache, o);
          first.start_epoch(8, 3);
          const auto head = drain(first, k);
          CHECK(head.size() == k);
          const LoaderPosition pos = first.position();
          CHECK(pos.seed == 8);
          CHECK(pos.epoch == 3);
          CHECK(pos.cursor == k);

          LoaderOptions other = o;  // a different machine may use other workers/prefetch
          other.workers = 3;
          other.prefetch = 1;
          Loader second(built.cache, other);
          second.restore(pos);
          CHECK(second.position().cursor == k);
          const auto tail = drain(second);
          REQUIRE(tail.size() == all.size() - k);
          for (size_t j = 0; j < tail.size(); ++j) CHECK(tail[j] == all[k + j]);
          for (size_t j = 0; j < head.size(); ++j) CHECK(head[j] == all[j]);
        }
        Loader past(built.cache, o);
        LoaderPosition bad{8, 3, 10};
        CHECK_THROWS_AS(past.restore(bad), Error);
      }
    }
  }

  TEST_CASE("destroying a Loader mid-epoch is prompt and clean") {
    TempDir dir;
    Spec spec;
    spec.shard_counts = {100, 100};
    const Built built = build_cache(dir.path(), spec);
    LoaderOptions o = small_options(4);
    o.workers = 4;
    o.prefetch = 3;
    o.transform.crop = CropMode::kRandomResized;
    o.transform.height = 16;
    o.transform.width = 16;
    int taken = 0, expected = 0;
    for (int iter = 0; iter < 50; ++iter) {
      Loader loader(built.cache, o);
      if (iter % 5 == 0) continue;  // never started
      loader.start_epoch(iter, 0);
      for (int k = 0; k < iter % 3; ++k) {
        const Batch* b = loader.next();
        taken += b != nullptr && b->size == 4;
        ++expected;
      }
    }  // ~Loader with workers busy and batches in flight
    CHECK(taken == expected);
  }

  TEST_CASE("next() after the end returns nullptr repeatedly; before a start it throws") {
    TempDir dir;
    const Built built = build_cache(dir.path(), Spec{});
    Loader loader(built.cache, small_options(20));
    CHECK_THROWS_AS(loader.next(), Error);
    loader.start_epoch(1, 1);
    CHECK(drain(loader).size() == 3);
    for (int i = 0; i < 5; ++i) CHECK(loader.next() == nullptr);
    CHECK(loader.position().cursor == 3);
    loader.start_epoch(1, 2);  // the next epoch starts over
    CHECK(drain(loader).size() == 3);
  }

  TEST_CASE("start_epoch and restore mid-epoch switch cleanly") {
    TempDir dir;
    const Built built = build_cache(dir.path(), Spec{});
    const LoaderOptions o = small_options(5);
    Loader reference(built.cache, o);
    reference.start_epoch(4, 1);
    const auto epoch1 = drain(reference);
    reference.start_epoch(4, 0);
    const auto epoch0 = drain(reference);
    REQUIRE(epoch0 != epoch1);

    Loader loader(built.cache, o);
    for (int round = 0; round < 10; ++round) {
      loader.start_epoch(4, 0);
      CHECK(drain(loader, static_cast<size_t>(round % 4)).size() == static_cast<size_t>(round % 4));
      loader.start_epoch(4, 1);
      CHECK(drain(loader) == epoch1);
      loader.start_epoch(4, 0);
      drain(loader, 2);
      loader.restore(LoaderPosition{4, 0, 7});
      const auto tail = drain(loader);
      CHECK(tail == std::vector<Taken>(epoch0.begin() + 7, epoch0.end()));
    }
  }

  TEST_CASE("a worker's error is rethrown by next() when its batch is due") {
    TempDir dir;
    const Built built = build_cache(dir.path(), Spec{});
    const uint64_t n = built.samples.size();
    for (CropMode crop : {CropMode::kNone, CropMode::kCenter}) {
      LoaderOptions o = small_options(4);
      o.sampler.shuffle = Shuffle::kNone;  // sample 21 is in batch 5
      o.transform.crop = crop;
      auto source = std::make_shared<FailingSource>(built.cache, 21);
      Loader loader(source, o);
      loader.start_epoch(0, 0);
      for (int k = 0; k < 5; ++k) REQUIRE(loader.next() != nullptr);
      for (int attempt = 0; attempt < 3; ++attempt) {
        try {
          loader.next();
          FAIL("next() should have thrown");
        } catch (const Error& e) {
          CHECK(e.kind() == ErrorKind::kCorruption);
          CHECK(e.path() == "cache.bin");
          CHECK(e.reason() == "slot 21");
        }
      }
      CHECK(loader.position().cursor == 5);
      // A restore past the bad batch carries on.
      loader.restore(LoaderPosition{0, 0, 6});
      const auto rest = drain(loader);
      CHECK(rest.size() == (n + 3) / 4 - 6);
    }
  }

  TEST_CASE("ragged caches are cropped to fixed-size batches") {
    for (Storage storage : storages()) {
      TempDir dir;
      Spec spec;
      spec.storage = storage;
      spec.layout = Layout::kRagged;
      const Built built = build_cache(dir.path(), spec);
      for (CropMode crop : {CropMode::kCenter, CropMode::kRandomResized}) {
        LoaderOptions o = small_options(8);
        o.transform.crop = crop;
        o.transform.height = 7;
        o.transform.width = 9;
        o.transform.flip = true;
        Loader loader(built.cache, o);
        loader.start_epoch(6, 2);
        const auto batches = drain(loader);
        CHECK(all_indices(batches).size() == built.samples.size());
        std::vector<uint8_t> expect(7 * 9 * 3);
        for (const Taken& t : batches) {
          CHECK(t.height == 7);
          CHECK(t.width == 9);
          CHECK(t.channels == 3);
          for (uint32_t j = 0; j < t.size; ++j) {
            const uint64_t i = t.indices[j];
            const SampleShape s = built.shapes[i];
            const ImageView view{built.samples[i].data(), s.height, s.width, s.channels, 0};
            const auto box = dscache::choose_crop(o.transform, s.height, s.width, 6, 2, i);
            dscache::crop_resize(view, box, 7, 9, expect.data());
            CHECK(std::memcmp(t.images.data() + j * expect.size(), expect.data(), expect.size()) ==
                  0);
            CHECK(t.labels[j] == built.labels[i]);
          }
        }
      }
    }
  }

  TEST_CASE("the constructor validates options and names the field") {
    TempDir fixed_dir, ragged_dir;
    const Built fixed = build_cache(fixed_dir.path(), Spec{});
    Spec ragged_spec;
    ragged_spec.layout = Layout::kRagged;
    const Built ragged = build_cache(ragged_dir.path(), ragged_spec);
    struct Case {
      const char* name;
      bool use_ragged;
      LoaderOptions options;
      const char* prefix;  // "" = accepted
    };
    std::vector<Case> cases;
    auto add = [&](const char* name, bool use_ragged, auto edit, const char* prefix) {
      LoaderOptions o = small_options();
      edit(o);
      cases.push_back({name, use_ragged, o, prefix});
    };
    add(
        "defaults", false, [](LoaderOptions&) {}, "");
    add(
        "batch 0", false, [](LoaderOptions& o) { o.batch_size = 0; },
        "loader.batch_size must be >= 1");
    add(
        "workers 0", false, [](LoaderOptions& o) { o.workers = 0; }, "loader.workers must be >= 1");
    add(
        "prefetch 0", false, [](LoaderOptions& o) { o.prefetch = 0; },
        "loader.prefetch must be >= 1");
    add(
        "rank", false,
        [](LoaderOptions& o) {
          o.sampler.rank = 2;
          o.sampler.world_size = 2;
        },
        "sampler.rank 2 >= sampler.world_size 2");
    add(
        "window", false,
        [](LoaderOptions& o) {
          o.sampler.shuffle = Shuffle::kWindowed;
          o.sampler.window_blocks = 0;
        },
        "sampler.window_blocks");
    add(
        "none resized", false, [](LoaderOptions& o) { o.transform.height = 12; },
        "transform.height 12 != stored height 6");
    add(
        "none same size", false,
        [](LoaderOptions& o) {
          o.transform.height = 6;
          o.transform.width = 5;
        },
        "");
    add(
        "bad scale", false,
        [](LoaderOptions& o) {
          o.transform.crop = CropMode::kRandomResized;
          o.transform.height = o.transform.width = 4;
          o.transform.scale_max = 2;
        },
        "transform.scale_max");
    add(
        "ragged none", true, [](LoaderOptions&) {}, "transform.crop none");
    add(
        "ragged no size", true, [](LoaderOptions& o) { o.transform.crop = CropMode::kCenter; },
        "transform.height");
    add(
        "ragged ok", true,
        [](LoaderOptions& o) {
          o.transform.crop = CropMode::kCenter;
          o.transform.height = o.transform.width = 4;
        },
        "");
    for (const Case& c : cases) {
      CAPTURE(c.name);
      const std::string msg = ctor_message(c.use_ragged ? ragged.cache : fixed.cache, c.options);
      CAPTURE(msg);
      if (*c.prefix == '\0') {
        CHECK(msg.empty());
      } else {
        CHECK(msg.rfind(c.prefix, 0) == 0);
      }
    }
    CHECK(ctor_message(nullptr, small_options()).find("source") != std::string::npos);
  }

  TEST_CASE("prefetch and buffer sizes that cannot be allocated are refused by name") {
    TempDir fixed_dir, ragged_dir;
    const Built fixed = build_cache(fixed_dir.path(), Spec{});
    Spec ragged_spec;
    ragged_spec.layout = Layout::kRagged;
    const Built ragged = build_cache(ragged_dir.path(), ragged_spec);
    auto center = [](uint32_t side) {
      LoaderOptions o = small_options();
      o.transform.crop = CropMode::kCenter;
      o.transform.height = o.transform.width = side;
      return o;
    };
    struct Case {
      const char* name;
      bool use_ragged;
      LoaderOptions options;
      const char* prefix;
      const char* contains;
    };
    std::vector<Case> cases;
    LoaderOptions o = small_options();
    o.prefetch = UINT32_MAX;  // prefetch + 1 slots wrapped to 0: SIGFPE in job % slots
    cases.push_back({"prefetch max", false, o, "loader.prefetch 4294967295 > 4096", ""});
    o.prefetch = dscache::kMaxPrefetch + 1;
    cases.push_back({"prefetch cap + 1", false, o, "loader.prefetch", ""});
    o = small_options();
    o.workers = 1u << 20;  // started threads until the system refused: std::system_error
    cases.push_back({"workers", false, o, "loader.workers 1048576 > 1024", ""});
    o = center(1u << 20);  // 2^24 x 3 x 2^40 wraps to 0: 64-byte buffers, workers write past them
    o.batch_size = 1u << 24;
    cases.push_back({"batch x sample wraps", false, o, "loader.batch_size 16777216", "64 bits"});
    cases.push_back({"ragged batch x sample wraps", true, o, "loader.batch_size", "64 bits"});
    o = center(UINT32_MAX);  // the sample's own h x w x c does not fit
    o.batch_size = 1;
    cases.push_back({"sample wraps", false, o, "transform:", "64 bits"});
    o = small_options();
    o.batch_size = 1u << 31;  // fits in 64 bits, not in memory (was std::bad_alloc)
    cases.push_back({"batch beyond memory", false, o, "loader.batch_size 2147483648", "memory"});
    for (const Case& c : cases) {
      const std::string name = c.name;
      CAPTURE(name);
      std::string msg;
      try {
        msg = ctor_message(c.use_ragged ? ragged.cache : fixed.cache, c.options);
      } catch (const std::bad_alloc&) {
        msg = "(std::bad_alloc escaped)";
      }
      CAPTURE(msg);
      CHECK(msg.rfind(c.prefix, 0) == 0);
      CHECK(msg.find(c.contains) != std::string::npos);
      CHECK(msg.find("std::") == std::string::npos);
    }
    // The largest prefetch works and yields every sample once.
    LoaderOptions big = small_options(4);
    big.prefetch = dscache::kMaxPrefetch;
    Loader loader(fixed.cache, big);
    loader.start_epoch(1, 0);
    std::vector<uint64_t> seen = all_indices(drain(loader));
    std::sort(seen.begin(), seen.end());
    CHECK(seen.size() == fixed.cache->size());
    CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
  }

  TEST_CASE("take_wait_seconds is non-negative and resets") {
    TempDir dir;
    const Built built = build_cache(dir.path(), Spec{});
    Loader loader(built.cache, small_options(3));
    loader.start_epoch(0, 0);
    drain(loader);
    const double waited = loader.take_wait_seconds();
    CHECK(waited >= 0.0);
    CHECK(loader.take_wait_seconds() == 0.0);
  }

}  // TEST_SUITE
