// The mixture order's promises over whole epochs: exact totals, stratified batches' shares, each
// source's stream (no sample twice within a pass, across epochs and segments), the prefix
// property the resume state relies on. Expectations come from mix_order_reference.h.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dscache/mix_order.h"
#include "mix_order_reference.h"

namespace {

using dscache::mix_counts;
using dscache::mix_segment_order;
using dscache::MixBatching;
using dscache::MixEntry;
using dscache::MixPlan;
using dscache::MixSegment;
using dscache::pure_epoch;
using dscache::test::draws_by_source;
using dscache::test::quantized;
using dscache::test::ref_largest_remainder;
using dscache::test::ref_u128;
using dscache::test::RefStreams;

using Draw = std::pair<uint64_t, uint64_t>;  // (pass, sample)

MixPlan plan_of(std::vector<uint64_t> sizes, MixBatching batching, uint64_t stratum, bool shuffle) {
  MixPlan plan;
  plan.sizes = std::move(sizes);
  plan.batching = batching;
  plan.stratum = stratum;
  plan.shuffle = shuffle;
  return plan;
}

std::vector<uint64_t> per_source(const std::vector<MixEntry>& entries, size_t first, size_t last,
                                 size_t sources) {
  std::vector<uint64_t> c(sources);
  for (size_t i = first; i < last; ++i) ++c[entries[i].source];
  return c;
}

// got is floor(num / den) or, when that leaves a remainder, its ceiling.
bool floor_or_ceil(uint64_t got, ref_u128 num, uint64_t den) {
  const ref_u128 f = num / den;
  return got == f || (got == f + 1 && num % den != 0);
}

// Every full batch of `b` positions holds floor or ceil of b x c_k / L of source k; the tail
// holds c_k - F_k, F = the largest-remainder split of the full batches' J x b positions.
void check_stratified(const std::vector<MixEntry>& entries, const std::vector<uint64_t>& counts,
                      uint64_t b) {
  const uint64_t length = entries.size(), full = length / b;
  const size_t k = counts.size();
  int bad = 0;
  for (uint64_t j = 0; j < full; ++j) {
    const std::vector<uint64_t> got = per_source(entries, j * b, (j + 1) * b, k);
    for (size_t s = 0; s < k; ++s) {
      if (!floor_or_ceil(got[s], static_cast<ref_u128>(b) * counts[s], length)) ++bad;
    }
  }
  CHECK(bad == 0);
  std::vector<uint64_t> tail = counts;
  if (full > 0) {
    const std::vector<uint64_t> f = ref_largest_remainder(full * b, counts);
    for (size_t s = 0; s < k; ++s) tail[s] -= f[s];
  }
  CHECK(per_source(entries, full * b, length, k) == tail);
  for (size_t s = 0; s < k; ++s)
    CHECK(floor_or_ceil(tail[s], static_cast<ref_u128>(length % b) * counts[s], length));
}

// Each aligned window [p x n, (p+1) x n) of a source's concatenated draws is a permutation of
// 0..n-1 (the last, partial one: distinct samples), and its draws say pass p.
void check_passes(const std::vector<Draw>& stream, uint64_t n) {
  int bad = 0;
  for (uint64_t p = 0; p * n < stream.size(); ++p) {
    std::vector<uint64_t> seen;
    for (uint64_t i = p * n; i < std::min<uint64_t>((p + 1) * n, stream.size()); ++i) {
      if (stream[i].first != p || stream[i].second >= n) ++bad;
      seen.push_back(stream[i].second);
    }
    std::sort(seen.begin(), seen.end());
    if (std::adjacent_find(seen.begin(), seen.end()) != seen.end()) ++bad;
  }
  CHECK(bad == 0);
}

struct Case {
  std::vector<uint64_t> sizes;
  std::vector<double> shares;
  bool repeats;
  uint64_t epoch_samples;
  uint64_t stratum;
};

}  // namespace

TEST_SUITE("mix_order") {
  TEST_CASE("epochs 0..5: exact totals, stratified shares, streams with no repeat in a pass") {
    const std::vector<Case> cases = {
        {{100, 50}, {0.7, 0.3}, false, 0, 16},
        {{100, 50}, {0.7, 0.3}, false, 0, 1000},                             // stratum > epoch
        {{10, 20, 30}, {1, 1, 1}, false, 0, 1},                              // stratum 1
        {{37}, {1}, false, 0, 8},                                            // one source
        {{5, 200, 13, 1, 64}, {0.1, 0.4, 0.2, 0.05, 0.25}, false, 500, 32},  // K = 5
        {{3, 1000}, {0.001, 0.999}, false, 1000, 64},                        // a count of 1
        {{100000, 7}, {0.5, 0.5}, false, 0, 256},  // large; a tiny source's passes
        {{10, 3}, {2.5, 0.5}, true, 0, 4},         // repeats
        {{10, 10}, {1, 0}, false, 0, 3},           // a source with weight 0
    };
    for (size_t c = 0; c < cases.size(); ++c) {
      const Case& t = cases[c];
      const std::vector<uint64_t> counts =
          mix_counts(t.sizes, quantized(t.shares), t.repeats, t.epoch_samples);
      for (MixBatching batching : {MixBatching::kRandom, MixBatching::kStratified}) {
        for (bool shuffle : {true, false}) {
          INFO("case " << c << " stratified " << (batching == MixBatching::kStratified)
                       << " shuffle " << shuffle);
          const MixPlan plan = plan_of(t.sizes, batching, t.stratum, shuffle);
          RefStreams ref(t.sizes, 17, shuffle);
          std::vector<std::vector<Draw>> streams(t.sizes.size());
          int wrong_draws = 0;
          for (uint64_t e = 0; e < 6; ++e) {
            const MixSegment seg = pure_epoch(counts, e);
            const std::vector<MixEntry> entries = mix_segment_order(plan, seg, 17);
            CHECK(per_source(entries, 0, entries.size(), counts.size()) == counts);
            if (batching == MixBatching::kStratified) check_stratified(entries, counts, t.stratum);
            const auto draws = draws_by_source(entries, t.sizes.size());
            for (uint32_t k = 0; k < draws.size(); ++k) {
              for (size_t j = 0; j < draws[k].size(); ++j) {
                if (draws[k][j] != ref.at(k, e * counts[k] + j)) ++wrong_draws;
              }
              streams[k].insert(streams[k].end(), draws[k].begin(), draws[k].end());
            }
          }
          CHECK(wrong_draws == 0);
          for (size_t k = 0; k < streams.size(); ++k) {
            if (t.sizes[k] > 0) check_passes(streams[k], t.sizes[k]);
          }
        }
      }
    }
  }

  TEST_CASE("a down-weighted source walks one pass over many epochs; repeat 3 gives 3 passes") {
    const std::vector<uint64_t> sizes = {1000, 10};
    const std::vector<uint64_t> counts = mix_counts(sizes, quantized({0.01, 0.99}), false, 0);
    REQUIRE(counts == std::vector<uint64_t>{10, 1000});  // 10.1 and 999.9 of 1010
    const MixPlan plan = plan_of(sizes, MixBatching::kRandom, 0, true);
    std::vector<uint64_t> seen;
    for (uint64_t e : {0, 1, 2, 3, 4, 5, 99, 100}) {
      const auto draws = draws_by_source(mix_segment_order(plan, pure_epoch(counts, e), 3), 2);
      REQUIRE(draws[0].size() == 10);
      for (const Draw& d : draws[0]) {
        CHECK(d.first == (e < 100 ? 0 : 1));
        if (e < 100) seen.push_back(d.second);
      }
    }
    std::sort(seen.begin(), seen.end());
    CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());  // 70 distinct of pass 0
    CHECK(seen.size() == 70);

    const std::vector<uint64_t> rep = mix_counts({8, 20}, quantized({3, 1}), true, 0);
    REQUIRE(rep == std::vector<uint64_t>{24, 20});
    for (MixBatching batching : {MixBatching::kRandom, MixBatching::kStratified}) {
      const MixPlan p = plan_of({8, 20}, batching, 4, true);
      for (uint64_t e : {0, 1}) {
        const auto d = draws_by_source(mix_segment_order(p, pure_epoch(rep, e), 9), 2)[0];
        REQUIRE(d.size() == 24);
        std::vector<std::vector<uint64_t>> passes(3);
        for (size_t j = 0; j < 24; ++j) {
          CHECK(d[j].first == 3 * e + j / 8);
          passes[j / 8].push_back(d[j].second);
        }
        CHECK_FALSE((passes[0] == passes[1] && passes[1] == passes[2]));
        for (std::vector<uint64_t>& q : passes) {
          std::sort(q.begin(), q.end());
          CHECK(q == std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7});
        }
      }
    }
  }

  TEST_CASE("prefix property: the first m positions draw stream prefixes, for every m") {
    const std::vector<uint64_t> sizes = {6, 4, 9};
    MixSegment seg;
    seg.epoch = 4;
    seg.segment = 2;
    seg.start = 33;
    seg.counts = {9, 7, 12};
    seg.drawn = {5, 17, 0};
    for (MixBatching batching : {MixBatching::kRandom, MixBatching::kStratified}) {
      INFO("stratified " << (batching == MixBatching::kStratified));
      const MixPlan plan = plan_of(sizes, batching, 5, true);
      RefStreams ref(sizes, 21);
      const std::vector<MixEntry> entries = mix_segment_order(plan, seg, 21);
      REQUIRE(entries.size() == 28);
      for (size_t m = 0; m <= entries.size(); ++m) {
        const std::vector<MixEntry> head(entries.begin(), entries.begin() + m);
        auto got = draws_by_source(head, sizes.size());
        for (uint32_t k = 0; k < sizes.size(); ++k) {
          std::vector<Draw> want;
          for (uint64_t j = 0; j < got[k].size(); ++j) want.push_back(ref.at(k, seg.drawn[k] + j));
          std::sort(got[k].begin(), got[k].end());
          std::sort(want.begin(), want.end());
          CHECK(got[k] == want);
        }
      }
    }
  }

  TEST_CASE("a later segment continues the streams: no repeat within a pass") {
    const std::vector<uint64_t> sizes = {100, 50};
    const std::vector<uint64_t> counts = mix_counts(sizes, quantized({0.7, 0.3}), false, 0);
    for (MixBatching batching : {MixBatching::kRandom, MixBatching::kStratified}) {
      INFO("stratified " << (batching == MixBatching::kStratified));
      const MixPlan plan = plan_of(sizes, batching, 16, true);
      std::vector<std::vector<Draw>> streams(2);
      auto append = [&](const std::vector<MixEntry>& e) {
        const auto d = draws_by_source(e, 2);
        for (size_t k = 0; k < 2; ++k)
          streams[k].insert(streams[k].end(), d[k].begin(), d[k].end());
      };
      for (uint64_t e = 0; e < 2; ++e) append(mix_segment_order(plan, pure_epoch(counts, e), 5));
      // Epoch 2: the weights become 0.2 / 0.8 at G = 48 (3 batches of 16).
      const uint64_t g = 48;
      const MixSegment first = pure_epoch(counts, 2);
      const std::vector<MixEntry> before = mix_segment_order(plan, first, 5);
      const std::vector<MixEntry> head(before.begin(), before.begin() + g);
      append(head);
      MixSegment later;
      later.epoch = 2;
      later.segment = 1;
      later.start = g;
      later.counts = ref_largest_remainder(150 - g, quantized({0.2, 0.8}));
      const std::vector<uint64_t> taken = per_source(head, 0, g, 2);
      later.drawn = {first.drawn[0] + taken[0], first.drawn[1] + taken[1]};
      const std::vector<MixEntry> after = mix_segment_order(plan, later, 5);
      CHECK(per_source(after, 0, after.size(), 2) == later.counts);
      if (batching == MixBatching::kStratified) check_stratified(after, later.counts, 16);
      append(after);
      // Epoch 3 under the new weights: a segment 0 from where epoch 2 ended.
      MixSegment next = pure_epoch(later.counts, 3);
      next.counts = ref_largest_remainder(150, quantized({0.2, 0.8}));
      next.drawn = {later.drawn[0] + later.counts[0], later.drawn[1] + later.counts[1]};
      append(mix_segment_order(plan, next, 5));
      RefStreams ref(sizes, 5);
      int wrong = 0;
      for (uint32_t k = 0; k < 2; ++k) {
        check_passes(streams[k], sizes[k]);
        for (uint64_t s = 0; s < streams[k].size(); ++s) wrong += streams[k][s] != ref.at(k, s);
      }
      CHECK(wrong == 0);
      CHECK(streams[1].size() > 2 * sizes[1]);  // source 1 ran past a pass boundary
    }
  }

}  // TEST_SUITE
