// Loader over time: resume (restore), restarts mid-epoch, the end of an epoch, a worker's
// error, destruction mid-epoch; and the constructor's checks of options and buffer sizes.
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
#include "loader_fixtures.h"
#include "test_util.h"

// The library's names the tests use unqualified come with loader_fixtures.h.
using namespace dscache::test;

TEST_SUITE("loader") {
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

          // A different machine may use other workers (0: filled on the calling thread).
          for (uint32_t workers : {3u, 0u}) {
            CAPTURE(workers);
            LoaderOptions other = o;
            other.workers = workers;
            other.prefetch = 1;
            Loader second(built.cache, other);
            second.restore(pos);
            CHECK(second.position().cursor == k);
            const auto tail = drain(second);
            REQUIRE(tail.size() == all.size() - k);
            for (size_t j = 0; j < tail.size(); ++j) CHECK(tail[j] == all[k + j]);
          }
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
    // (crop, workers): with 0 workers the failing fill runs on the consumer's own thread.
    const std::pair<CropMode, uint32_t> cases[] = {
        {CropMode::kNone, 2}, {CropMode::kCenter, 2}, {CropMode::kCenter, 0}};
    for (const auto& [crop, workers] : cases) {
      CAPTURE(workers);
      LoaderOptions o = small_options(4);
      o.sampler.shuffle = Shuffle::kNone;  // sample 21 is in batch 5
      o.transform.crop = crop;
      o.workers = workers;
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
        "workers 0", false, [](LoaderOptions& o) { o.workers = 0; }, "");
    add(
        "prefetch 0", false, [](LoaderOptions& o) { o.prefetch = 0; },
        "loader.prefetch must be >= 1");
    add(
        "stride 0", false, [](LoaderOptions& o) { o.batch_stride = 0; },
        "loader.batch_stride must be >= 1");
    add(
        "offset past stride", false,
        [](LoaderOptions& o) {
          o.batch_stride = 3;
          o.batch_offset = 3;
        },
        "loader.batch_offset 3 must be < batch_stride 3");
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

}  // TEST_SUITE
