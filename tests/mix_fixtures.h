// Fixtures of the mixture Loader tests (test_loader_mixture*.cpp): two real caches mixed, batches
// copied out with their sources, and the global order they must follow (mix_order.h's pure
// functions, cut into ranks by the rule written here).
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dscache/mix_order.h"
#include "dscache/mixture.h"
#include "loader_fixtures.h"

namespace dscache::test {

using dscache::EpochPosition;
using dscache::MixBatching;
using dscache::MixEntry;
using dscache::MixSource;
using dscache::Mixture;
using dscache::MixtureOptions;
using dscache::WeightChange;

// Cache a: 53 samples of 6x5x3 in classes a..d; cache b: 17 samples (ragged: a ragged cache)
// in classes d, e (d shared: unified 3; e: 4).
struct Pair {
  Built a, b;
  std::vector<std::string> classes_b{"d", "e"};
};

inline Pair build_pair(const std::string& dir, Layout b_layout = Layout::kFixed) {
  Pair p;
  p.a = build_cache(dir + "/a", Spec{});
  Spec sb;
  sb.shard_counts = {10, 7};
  sb.classes = p.classes_b;
  sb.seed = 7;
  sb.layout = b_layout;
  p.b = build_cache(dir + "/b", sb);
  return p;
}

// weights (wa, wb), or repeats when `repeats`.
inline std::shared_ptr<const Mixture> mix_of(const Pair& p, double wa, double wb,
                                             bool repeats = false, MixtureOptions o = {}) {
  MixSource a, b;
  a.source = p.a.cache;
  a.name = "a";
  a.classes = Spec{}.classes;
  b.source = p.b.cache;
  b.name = "b";
  b.classes = p.classes_b;
  (repeats ? a.repeat : a.weight) = wa;
  (repeats ? b.repeat : b.weight) = wb;
  return Mixture::make({a, b}, o);
}

// The unified label of source k's local label.
inline int64_t unified(const Mixture& m, uint32_t k, int64_t label) {
  return m.remap(k)[static_cast<size_t>(label)];
}

// One batch with its sources.
struct MixTaken : Taken {
  std::vector<uint32_t> sources;
  bool operator==(const MixTaken& o) const {
    return static_cast<const Taken&>(*this) == o && sources == o.sources;
  }
};

inline std::vector<MixTaken> drain_mix(Loader& loader, size_t limit = SIZE_MAX) {
  std::vector<MixTaken> out;
  while (out.size() < limit) {
    const Batch* b = loader.next();
    if (b == nullptr) break;
    MixTaken t;
    static_cast<Taken&>(t) = copy_of(*b);
    REQUIRE(b->sources != nullptr);
    t.sources.assign(b->sources, b->sources + b->size);
    out.push_back(std::move(t));
  }
  return out;
}

// What one global position served: (source, local index), its label and image.
struct Served {
  uint32_t source = 0;
  uint64_t local = 0;
  int64_t label = 0;
  std::vector<uint8_t> image;
};

// Rank batches -> global positions: rank r's sample k is global position r + k x world.
inline void collect(const std::vector<MixTaken>& batches, uint32_t batch_size, uint32_t rank,
                    uint32_t world, std::map<uint64_t, Served>* out) {
  for (const MixTaken& t : batches) {
    const size_t px = size_t{t.height} * t.width * t.channels;
    for (size_t e = 0; e < t.size; ++e) {
      const uint64_t k = t.index * batch_size + e;
      Served s{t.sources[e], t.indices[e], t.labels[e],
               std::vector<uint8_t>(t.images.begin() + e * px, t.images.begin() + (e + 1) * px)};
      (*out)[rank + k * world] = std::move(s);
    }
  }
}

// The epoch's global entries for a mixture that never changed its weights.
inline std::vector<MixEntry> reference_order(const Mixture& m, bool shuffle, uint64_t stratum,
                                             uint64_t seed, uint64_t epoch) {
  return dscache::mix_segment_order(m.plan(shuffle, stratum),
                                    dscache::pure_epoch(m.counts(), epoch), seed);
}

// The mixture sample's transform key: stream_id("mixdraw", view index, pass).
inline uint64_t mix_key(const Mixture& m, const MixEntry& e) {
  return dscache::stream_id(0x6d697864726177ull, m.offset(e.source) + e.local, e.pass);
}

}  // namespace dscache::test
