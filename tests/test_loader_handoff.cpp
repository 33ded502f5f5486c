// Loader: field_allocator. With hand_off_images a batch's field values are handed over with its
// images (buffers of their own from field_allocator, released once each when the next batch is
// taken), so a kept batch's fields never change; a misaligned or half allocator is refused.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dscache/loader.h"
#include "field_fixtures.h"
#include "loader_fixtures.h"
#include "test_util.h"

using namespace dscache::test;
using dscache::FieldBatch;

namespace {

// An allocator that records what it gave and keeps released memory until the end (so that a
// kept batch's pointers stay readable), refusing a release it did not give or gave back.
struct Recorder {
  std::vector<void*> live, released;
  size_t allocated = 0;
  dscache::BufferAllocator allocator() {
    dscache::BufferAllocator a;
    a.allocate = [this](size_t bytes) {
      live.push_back(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
      ++allocated;
      return live.back();
    };
    a.release = [this](void* p) {
      auto it = std::find(live.begin(), live.end(), p);
      REQUIRE(it != live.end());
      live.erase(it);
      released.push_back(p);
    };
    return a;
  }
  ~Recorder() {
    for (void* p : released) std::free(p);
  }
};

}  // namespace

TEST_SUITE("loader_fields") {
  TEST_CASE("field_allocator + hand_off_images: kept batches keep their field values") {
    auto src = std::make_shared<FieldSource>(FieldSource::Options{});
    for (bool crop : {false, true}) {
      CAPTURE(crop);
      LoaderOptions o = small_options(5);  // prefetch 2: 3 slots
      if (crop) {
        o.transform.crop = CropMode::kRandomResized;
        o.transform.height = 24;
        o.transform.width = 32;
        o.transform.flip = true;
      }
      Loader plain(src, o);
      plain.start_epoch(4, 1);
      std::vector<std::vector<TakenField>> want;
      while (const Batch* b = plain.next()) want.push_back(fields_of(*b));
      Recorder images, fields;
      o.hand_off_images = true;
      o.allocator = images.allocator();
      o.field_allocator = fields.allocator();
      {
        Loader loader(src, o);
        loader.start_epoch(4, 1);
        std::vector<std::vector<FieldBatch>> kept;  // pointers into the handed-off buffers
        std::set<const uint8_t*> seen;
        while (const Batch* b = loader.next()) {
          kept.push_back(b->fields);
          for (const FieldBatch& f : b->fields) {
            CHECK(seen.insert(f.data).second);  // no buffer serves two batches
            CHECK(std::find(fields.live.begin(), fields.live.end(), f.data) != fields.live.end());
          }
        }
        REQUIRE(kept.size() == want.size());
        for (size_t k = 0; k < kept.size(); ++k) {  // read after every later batch was filled
          CAPTURE(k);
          REQUIRE(kept[k].size() == want[k].size());
          for (size_t f = 0; f < kept[k].size(); ++f) {
            CAPTURE(want[k][f].name);
            const std::vector<uint8_t>& w = want[k][f].data;
            CHECK(kept[k][f].bytes == w.size());
            CHECK(std::equal(w.begin(), w.end(), kept[k][f].data));
          }
        }
        // The slots' buffers, then one per field per batch handed off.
        CHECK(fields.allocated >= kFsCount * (3 + kept.size()));
        CHECK(images.allocated == 3 + kept.size());
      }
      CHECK(fields.live.empty());  // every buffer released exactly once (Recorder checks)
      CHECK(images.live.empty());
    }
  }

  TEST_CASE("field_allocator: misaligned memory and a half allocator are refused by name") {
    auto src = std::make_shared<FieldSource>(FieldSource::Options{});
    std::vector<void*> owned;
    LoaderOptions bad = small_options(5);
    bad.field_allocator.allocate = [&](size_t bytes) {
      owned.push_back(std::aligned_alloc(64, bytes + 64));
      return static_cast<uint8_t*>(owned.back()) + 8;
    };
    bad.field_allocator.release = [&](void* p) {
      auto it = std::find(owned.begin(), owned.end(), static_cast<uint8_t*>(p) - 8);
      REQUIRE(it != owned.end());
      std::free(*it);
      owned.erase(it);
    };
    CHECK(ctor_message(src, bad).find("loader.field_allocator returned memory not aligned") !=
          std::string::npos);
    CHECK(owned.empty());
    LoaderOptions half = small_options(5);
    half.field_allocator.release = [](void* p) { std::free(p); };
    CHECK(ctor_message(src, half).find("loader.field_allocator needs both") != std::string::npos);
  }
}
