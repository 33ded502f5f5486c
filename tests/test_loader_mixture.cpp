// A Loader over a Mixture: the mixture's order cut into ranks and batches, per-source counts
// and shares, labels unified, indices and sources per sample, images from the sample's own
// source, independent of workers and world size; crops of a ragged mixture; the refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dscache/loader.h"
#include "dscache/transform.h"
#include "field_fixtures.h"
#include "mix_fixtures.h"
#include "test_util.h"

using namespace dscache::test;

namespace {

LoaderOptions mix_options(uint32_t batch, uint32_t rank = 0, uint32_t world = 1) {
  LoaderOptions o = small_options(batch);
  o.sampler.rank = rank;
  o.sampler.world_size = world;
  return o;
}

// Every rank of `world` over one epoch, by global position.
std::map<uint64_t, Served> run_ranks(std::shared_ptr<const Mixture> m, LoaderOptions o,
                                     uint32_t world, uint64_t seed, uint64_t epoch) {
  std::map<uint64_t, Served> served;
  for (uint32_t r = 0; r < world; ++r) {
    o.sampler.rank = r;
    o.sampler.world_size = world;
    Loader loader(m, o);
    loader.start_epoch(seed, epoch);
    collect(drain_mix(loader), o.batch_size, r, world, &served);
  }
  return served;
}

}  // namespace

TEST_SUITE("loader") {
  TEST_CASE("mixture: the epoch follows the mixture's order; counts, labels, images exact") {
    TempDir dir;
    const Pair p = build_pair(dir.path());
    auto m = mix_of(p, 0.7, 0.3);
    REQUIRE(m->epoch_samples() == 70);  // 53 + 17
    // 0.7 x 70 = 49, 0.3 x 70 = 21: b (17 samples) is walked past its first pass.
    REQUIRE(m->counts() == std::vector<uint64_t>{49, 21});
    for (uint64_t epoch : {0, 1, 2}) {
      CAPTURE(epoch);
      Loader loader(m, mix_options(8));
      CHECK(loader.mixture() == m);
      CHECK(loader.epoch_length() == 70);
      loader.start_epoch(3, epoch);
      const std::vector<MixTaken> batches = drain_mix(loader);
      CHECK(batches.size() == 9);  // 70 / 8, rounded up
      const std::vector<MixEntry> ref = reference_order(*m, true, 8, 3, epoch);
      REQUIRE(ref.size() == 70);
      std::vector<uint64_t> count(2, 0);
      uint64_t pos = 0;
      for (const MixTaken& t : batches) {
        for (size_t e = 0; e < t.size; ++e, ++pos) {
          CAPTURE(pos);
          const uint32_t k = t.sources[e];
          REQUIRE(k < 2);
          ++count[k];
          CHECK(k == ref[pos].source);
          CHECK(t.indices[e] == ref[pos].local);
          const Built& src = k == 0 ? p.a : p.b;
          CHECK(t.labels[e] == unified(*m, k, src.labels[t.indices[e]]));
          CHECK(t.labels[e] == m->view()->label(m->offset(k) + t.indices[e]));
          const size_t px = 6 * 5 * 3;
          CHECK(std::equal(t.images.begin() + e * px, t.images.begin() + (e + 1) * px,
                           src.samples[t.indices[e]].begin()));
        }
      }
      CHECK(count == m->counts());
      // No sample repeats within a pass of its source; a's 49 draws of epoch e are stream
      // positions [49e, 49e + 49), so its passes are those positions / 53.
      std::set<std::pair<uint32_t, uint64_t>> seen[2];
      for (const MixEntry& e : ref) CHECK(seen[e.source].insert({e.pass, e.local}).second);
      std::set<uint32_t> a_passes;
      for (const auto& pl : seen[0]) a_passes.insert(pl.first);
      CHECK(*a_passes.begin() == 49 * epoch / 53);
      CHECK(*a_passes.rbegin() == (49 * epoch + 48) / 53);
    }
  }

  TEST_CASE("mixture: stratified batches hold each source's share; a single cache has no sources") {
    TempDir dir;
    const Pair p = build_pair(dir.path());
    MixtureOptions mo;
    mo.batching = MixBatching::kStratified;
    auto m = mix_of(p, 0.7, 0.3, false, mo);
    // Two ranks of 5: the stratum is the global batch of 10.
    const std::map<uint64_t, Served> served = run_ranks(m, mix_options(5), 2, 11, 1);
    REQUIRE(served.size() == 70);
    for (uint64_t j = 0; j < 7; ++j) {
      uint64_t a = 0;
      for (uint64_t q = j * 10; q < j * 10 + 10; ++q) a += served.at(q).source == 0 ? 1 : 0;
      CAPTURE(j);
      CHECK(a == 7);  // 10 x 49 / 70 = 7 exactly
    }
    // Uneven shares: 10 x 0.65 = 6.5: 6 or 7 of source a in every global batch, 45 in all.
    auto uneven = mix_of(p, 0.65, 0.35, false, mo);
    REQUIRE(uneven->counts() == std::vector<uint64_t>{45, 25});  // 45.5, 24.5: tie, lower index
    const std::map<uint64_t, Served> s2 = run_ranks(uneven, mix_options(5), 2, 11, 1);
    uint64_t total = 0;
    for (uint64_t j = 0; j < 7; ++j) {
      uint64_t a = 0;
      for (uint64_t q = j * 10; q < j * 10 + 10; ++q) a += s2.at(q).source == 0 ? 1 : 0;
      CAPTURE(j);
      CHECK(a >= 6);
      CHECK(a <= 7);
      total += a;
    }
    CHECK(total == 45);

    Loader single(p.a.cache, mix_options(8));
    single.start_epoch(3, 0);
    const Batch* b = single.next();
    REQUIRE(b != nullptr);
    CHECK(b->sources == nullptr);
    CHECK(single.mixture() == nullptr);
  }

  TEST_CASE("mixture: workers 0, 1 and 4 serve identical batches, crops and flips included") {
    TempDir dir;
    const Pair p = build_pair(dir.path());
    auto m = mix_of(p, 1, 3, true);  // repeats: b three times an epoch
    std::vector<MixTaken> first;
    for (uint32_t workers : {0u, 1u, 4u}) {
      CAPTURE(workers);
      LoaderOptions o = mix_options(7);
      o.workers = workers;
      o.transform.crop = CropMode::kRandomResized;
      o.transform.height = 4;
      o.transform.width = 4;
      o.transform.flip = true;
      Loader loader(m, o);
      loader.start_epoch(9, 4);
      const std::vector<MixTaken> got = drain_mix(loader);
      CHECK(got.size() == (53 + 51 + 6) / 7);
      if (first.empty()) {
        first = got;
      } else {
        CHECK(got == first);
      }
    }
  }

  TEST_CASE("mixture: ranks 1..4 together serve the one-rank order (pad aside)") {
    TempDir dir;
    const Pair p = build_pair(dir.path());
    auto m = mix_of(p, 0.6, 0.4);
    const std::map<uint64_t, Served> one = run_ranks(m, mix_options(6), 1, 5, 2);
    REQUIRE(one.size() == 70);
    for (uint32_t world : {2u, 3u, 4u}) {
      for (RankTail tail : {RankTail::kPad, RankTail::kDrop}) {
        CAPTURE(world);
        CAPTURE(static_cast<int>(tail));
        LoaderOptions o = mix_options(6);
        o.sampler.tail = tail;
        const std::map<uint64_t, Served> got = run_ranks(m, o, world, 5, 2);
        const uint64_t len =
            tail == RankTail::kPad ? (70 + world - 1) / world * world : 70 / world * world;
        CHECK(got.size() == len);
        for (const auto& [q, s] : got) {
          CAPTURE(q);
          const Served& want = one.at(q < 70 ? q : (q - 70) % 70);  // the pad repeats the start
          CHECK(s.source == want.source);
          CHECK(s.local == want.local);
          CHECK(s.label == want.label);
          CHECK(s.image == want.image);
        }
      }
    }
  }

  TEST_CASE("mixture: a fixed and a ragged cache under a crop; without a crop, refused") {
    TempDir dir;
    const Pair p = build_pair(dir.path(), Layout::kRagged);
    auto m = mix_of(p, 0.5, 0.5);
    REQUIRE(m->view()->layout() == Layout::kRagged);
    LoaderOptions o = mix_options(8);
    o.transform.crop = CropMode::kCenter;
    o.transform.height = 4;
    o.transform.width = 3;
    Loader loader(m, o);
    loader.start_epoch(2, 0);
    uint64_t checked = 0;
    for (const MixTaken& t : drain_mix(loader)) {
      CHECK(t.height == 4);
      CHECK(t.width == 3);
      for (size_t e = 0; e < t.size; ++e, ++checked) {
        const Built& src = t.sources[e] == 0 ? p.a : p.b;
        const SampleShape s = src.shapes.empty() ? SampleShape{6, 5, 3} : src.shapes[t.indices[e]];
        const dscache::CropBox box = dscache::choose_crop(o.transform, s.height, s.width, 0, 0, 0);
        std::vector<uint8_t> want(4 * 3 * 3);
        dscache::crop_resize(ImageView{src.samples[t.indices[e]].data(), s.height, s.width, 3}, box,
                             4, 3, want.data());
        CHECK(std::equal(want.begin(), want.end(), t.images.begin() + e * want.size()));
      }
    }
    CHECK(checked == 70);
    const std::string msg = ctor_message(m->view(), mix_options(8));
    CHECK(msg.find("crop") != std::string::npos);
    CHECK(invalid_argument_message([&] { Loader l(m, mix_options(8)); }) == msg);
  }

  TEST_CASE("mixture: the windowed shuffle is refused by name; direct read does not apply") {
    TempDir dir;
    const Pair p = build_pair(dir.path());
    auto m = mix_of(p, 0.5, 0.5);
    LoaderOptions o = mix_options(8);
    o.sampler.shuffle = Shuffle::kWindowed;
    o.sampler.block = 4;
    CHECK(invalid_argument_message([&] { Loader l(m, o); }) ==
          "mixture: shuffle \"windowed\" is not supported: random batching shuffles the whole "
          "mixed epoch, which undoes the windows, and stratified batching keeps one window of "
          "every source open at once, so the window no longer bounds memory; use shuffle "
          "\"global\", or serve a cache larger than memory alone");
    Loader l(m, mix_options(8));
    CHECK(l.direct_read_reason() == "auto: not applicable (mixture)");
  }

  TEST_CASE("mixture: repeat 3 gives the same sample a different crop on each pass") {
    TempDir dir;
    const Pair p = build_pair(dir.path());
    auto m = mix_of(p, 1, 3, true);
    LoaderOptions o = mix_options(16);
    o.transform.crop = CropMode::kRandomResized;
    o.transform.height = 4;
    o.transform.width = 4;
    o.transform.flip = true;
    Loader loader(m, o);
    loader.start_epoch(4, 1);
    const std::vector<MixEntry> ref = reference_order(*m, true, 16, 4, 1);
    std::map<uint64_t, std::vector<dscache::CropBox>> b_boxes;  // b's sample -> its crops
    uint64_t pos = 0;
    for (const MixTaken& t : drain_mix(loader)) {
      for (size_t e = 0; e < t.size; ++e, ++pos) {
        REQUIRE(t.sources[e] == ref[pos].source);
        const Built& src = t.sources[e] == 0 ? p.a : p.b;
        const dscache::CropBox box =
            dscache::choose_crop(o.transform, 6, 5, 4, 1, mix_key(*m, ref[pos]));
        std::vector<uint8_t> want(4 * 4 * 3);
        dscache::crop_resize(ImageView{src.samples[t.indices[e]].data(), 6, 5, 3}, box, 4, 4,
                             want.data());
        CHECK(std::equal(want.begin(), want.end(), t.images.begin() + e * want.size()));
        if (t.sources[e] == 1) b_boxes[t.indices[e]].push_back(box);
      }
    }
    REQUIRE(b_boxes.size() == 17);
    uint64_t differing = 0;
    for (const auto& [local, boxes] : b_boxes) {
      REQUIRE(boxes.size() == 3);  // three passes in one epoch
      const auto same = [](const dscache::CropBox& x, const dscache::CropBox& y) {
        return x.x == y.x && x.y == y.y && x.height == y.height && x.width == y.width &&
               x.flip == y.flip;
      };
      if (!same(boxes[0], boxes[1]) || !same(boxes[1], boxes[2])) ++differing;
    }
    CHECK(differing >= 15);
  }

  TEST_CASE("mixture: fields come from the sample's own source; labels without classes pass") {
    FieldSource::Options oa, ob;
    ob.count = 10;
    ob.ragged = true;
    auto a = std::make_shared<FieldSource>(oa);
    auto b = std::make_shared<FieldSource>(ob);
    MixSource sa, sb;
    sa.source = a;
    sb.source = b;
    sa.weight = 0.5;
    sb.weight = 0.5;
    auto m = Mixture::make({sa, sb});
    CHECK(m->classes().empty());
    LoaderOptions o = small_options(6);
    o.transform.crop = CropMode::kCenter;
    o.transform.height = o.transform.width = 32;
    o.fields = std::vector<std::string>{"score", "hot", "box_id"};
    Loader loader(m, o);
    loader.start_epoch(1, 0);
    uint64_t seen = 0;
    while (const Batch* batch = loader.next()) {
      REQUIRE(batch->sources != nullptr);
      const std::vector<TakenField> f = fields_of(*batch);
      REQUIRE(f.size() == 3);
      for (uint32_t k = 0; k < batch->size; ++k, ++seen) {
        const uint64_t i = batch->indices[k];
        CAPTURE(i);
        CHECK(i < (batch->sources[k] == 0 ? 24u : 10u));
        CHECK(batch->labels[k] == int64_t(i % 7));
        float score = 0;
        std::memcpy(&score, f[0].sample(k, batch->size, 4).data(), 4);
        CHECK(score == float(i) + 0.25f);
        CHECK(f[1].sample(k, batch->size, 1) ==
              std::vector<uint8_t>{uint8_t(i % 2), uint8_t(i % 3), uint8_t(i % 5)});
        const std::vector<uint8_t> ids = f[2].sample(k, batch->size, 8);
        for (size_t r = 0; r < ids.size() / 8; ++r) {
          int64_t id = 0;
          std::memcpy(&id, ids.data() + r * 8, 8);
          CHECK(id / 100 == int64_t(i));
        }
      }
    }
    CHECK(seen == 34);
  }
}
