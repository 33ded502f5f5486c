// What the dscache-train mixture tests share (test_trainer_mix.cpp, test_trainer_mix_elastic.cpp):
// caches with their own class names, an independent largest-remainder reference, and
// DSCACHE_TEST_SAMPLE_LOG's mixture lines ("EPOCH STEP RANK SOURCE:INDEX..."). No LibTorch.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "fixtures.h"

namespace trainer_test {

// `n` synthetic 8x8x1 samples labelled with `names`, written as the cache `dir`.
inline void write_named_cache(const std::string& dir, uint64_t n,
                              const std::vector<std::string>& names, uint64_t seed) {
  Dataset d = synthetic(n, 8, 8, 1, static_cast<uint32_t>(names.size()), seed);
  d.class_names = names;
  write_cache(dir, d);
}

// Hamilton's method written out: floor(total x w / sum w) each, then one more for the largest
// fractional parts (ties to the lower index). The reference the trainer's counts must equal.
inline std::vector<uint64_t> largest_remainder_ref(uint64_t total, const std::vector<double>& w) {
  double sum = 0;
  for (double x : w) sum += x;
  std::vector<uint64_t> parts;
  std::vector<std::pair<double, size_t>> rest;
  uint64_t given = 0;
  for (size_t k = 0; k < w.size(); ++k) {
    const double exact = static_cast<double>(total) * w[k] / sum;
    parts.push_back(static_cast<uint64_t>(std::floor(exact)));
    given += parts.back();
    rest.push_back({exact - std::floor(exact), k});
  }
  std::stable_sort(rest.begin(), rest.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (uint64_t i = 0; given + i < total; ++i) ++parts[rest[i].second];
  return parts;
}

// One sample of a mixture: (source, index within it).
using MixSample = std::pair<uint32_t, uint64_t>;

// One global step of a sample log: its epoch and all ranks' samples, sorted.
struct MixStep {
  uint64_t epoch = 0;
  std::vector<MixSample> samples;
};

// A sample log's lines by step; REQUIREs every sample to be "SOURCE:INDEX".
inline std::map<uint64_t, MixStep> mix_steps_of(const std::string& text) {
  std::map<uint64_t, MixStep> steps;
  std::istringstream in(text);
  std::string line, word;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    uint64_t epoch = 0, step = 0;
    int rank = 0;
    const bool parsed = static_cast<bool>(words >> epoch >> step >> rank);
    REQUIRE(parsed);
    MixStep& s = steps[step];
    s.epoch = epoch;
    while (words >> word) {
      const size_t colon = word.find(':');
      REQUIRE(colon != std::string::npos);
      s.samples.push_back({static_cast<uint32_t>(std::stoul(word.substr(0, colon))),
                           std::stoull(word.substr(colon + 1))});
    }
  }
  for (auto& [step, s] : steps) std::sort(s.samples.begin(), s.samples.end());
  return steps;
}

}  // namespace trainer_test
