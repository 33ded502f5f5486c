// Fixtures of the Loader tests (test_loader*.cpp): caches written and opened, batches copied
// out of the Loader's buffers, and sources that fail or count what the Loader asks of them.
#pragma once

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

namespace dscache::test {

// The library's names the test files use unqualified: they take them, with the fixtures,
// by `using namespace dscache::test`.
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
inline Built build_cache(const std::string& dir, const Spec& spec) {
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

inline Taken copy_of(const Batch& b) {
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
inline std::vector<Taken> drain(Loader& loader, size_t limit = SIZE_MAX) {
  std::vector<Taken> out;
  while (out.size() < limit) {
    const Batch* b = loader.next();
    if (b == nullptr) break;
    out.push_back(copy_of(*b));
  }
  return out;
}

inline std::vector<uint64_t> all_indices(const std::vector<Taken>& batches) {
  std::vector<uint64_t> v;
  for (const Taken& t : batches) v.insert(v.end(), t.indices.begin(), t.indices.end());
  return v;
}

// The 97-sample cache of three shards (30, 30, 37) in `storage`, written into `dir`, opened in
// pread mode: what the pread tests compare with the same cache mapped.
inline std::shared_ptr<Cache> pread_cache(const std::string& dir, Storage storage, Built* built) {
  Spec spec;
  spec.storage = storage;
  spec.shard_counts = {30, 30, 37};
  *built = build_cache(dir, spec);
  dscache::CacheOptions po;
  po.memory = dscache::MemoryMode::kPread;
  auto c = Cache::open(dir, po);
  REQUIRE(c->memory_mode() == dscache::MemoryMode::kPread);
  return c;
}

inline LoaderOptions small_options(uint32_t batch_size = 8) {
  LoaderOptions o;
  o.batch_size = batch_size;
  o.workers = 2;
  o.prefetch = 2;
  return o;
}

inline std::string ctor_message(std::shared_ptr<const SampleSource> source,
                                const LoaderOptions& o) {
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

}  // namespace dscache::test
