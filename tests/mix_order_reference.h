// Independent references for the mixture order's tests (test_mix_order*.cpp): written from
// mix_order.h's contract, not from the library's code.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dscache/mix_order.h"
#include "dscache/sampler.h"

namespace dscache::test {

__extension__ typedef unsigned __int128 ref_u128;

// A stream tag as sampler.h describes them: the tag's ASCII bytes, big-endian packed.
inline uint64_t pack_tag(const std::string& tag) {
  uint64_t v = 0;
  for (unsigned char c : tag) v = (v << 8) | c;
  return v;
}

// Hamilton's method the slow way: the floors, then one unit at a time to the largest remainder
// not yet topped up, scanning from index 0 so a tie goes to the lower index.
inline std::vector<uint64_t> ref_largest_remainder(uint64_t total,
                                                   const std::vector<uint64_t>& quotas) {
  ref_u128 sum = 0;
  for (uint64_t q : quotas) sum += q;
  REQUIRE(sum > 0);
  std::vector<uint64_t> parts;
  std::vector<ref_u128> rem;
  ref_u128 given = 0;
  for (uint64_t q : quotas) {
    const ref_u128 exact = static_cast<ref_u128>(total) * q;
    parts.push_back(static_cast<uint64_t>(exact / sum));
    rem.push_back(exact % sum);
    given += parts.back();
  }
  std::vector<bool> topped(quotas.size(), false);
  for (ref_u128 left = total - given; left > 0; --left) {
    size_t best = quotas.size();
    for (size_t i = 0; i < quotas.size(); ++i) {
      if (!topped[i] && (best == quotas.size() || rem[i] > rem[best])) best = i;
    }
    REQUIRE(best < quotas.size());
    topped[best] = true;
    ++parts[best];
  }
  return parts;
}

// Source k's pass p as mix_order.h defines it: Fisher-Yates from the back over 0..n-1 (position
// i takes a uniform element of [0, i]), drawn from Rng(seed, stream_id("mixpass", k, p)).
inline std::vector<uint64_t> ref_pass(uint64_t n, uint64_t seed, uint32_t k, uint64_t p,
                                      bool shuffle = true) {
  std::vector<uint64_t> perm(n);
  for (uint64_t i = 0; i < n; ++i) perm[i] = i;
  if (!shuffle) return perm;
  Rng rng(seed, stream_id(pack_tag("mixpass"), k, p));
  for (uint64_t i = n; i > 1; --i) std::swap(perm[i - 1], perm[rng.below(i)]);
  return perm;
}

// Every source's stream (mix_order.h): stream position s of source k is (pass s / n_k, sample
// ref_pass(..., s / n_k)[s mod n_k]). Passes are built on first use and kept.
class RefStreams {
 public:
  RefStreams(std::vector<uint64_t> sizes, uint64_t seed, bool shuffle = true)
      : sizes_(std::move(sizes)), seed_(seed), shuffle_(shuffle) {}

  std::pair<uint64_t, uint64_t> at(uint32_t k, uint64_t s) {
    const uint64_t n = sizes_.at(k), p = s / n;
    auto it = passes_.find({k, p});
    if (it == passes_.end())
      it = passes_.emplace(std::make_pair(k, p), ref_pass(n, seed_, k, p, shuffle_)).first;
    return {p, it->second[s % n]};
  }

 private:
  std::vector<uint64_t> sizes_;
  uint64_t seed_;
  bool shuffle_;
  std::map<std::pair<uint32_t, uint64_t>, std::vector<uint64_t>> passes_;
};

// Per source, the (pass, sample) of each of its draws, in position order.
inline std::vector<std::vector<std::pair<uint64_t, uint64_t>>> draws_by_source(
    const std::vector<MixEntry>& entries, size_t sources) {
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> out(sources);
  for (const MixEntry& e : entries) {
    REQUIRE(e.source < sources);
    out[e.source].emplace_back(e.pass, e.local);
  }
  return out;
}

inline std::vector<uint64_t> quantized(const std::vector<double>& shares) {
  std::vector<uint64_t> q;
  for (double s : shares) q.push_back(quantize_share(s, "share"));
  return q;
}

}  // namespace dscache::test
