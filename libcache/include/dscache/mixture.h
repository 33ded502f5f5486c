// Mixture: several caches served as one, each with its share of an epoch. A Loader made over a
// Mixture serves the order of dscache/mix_order.h, labels unified by class name, and says which
// source every sample came from. docs/SERVING.md "Mixing caches".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dscache/mix_order.h"
#include "dscache/sample_source.h"

namespace dscache {

struct MixSource {
  std::shared_ptr<const SampleSource> source;  // shared, not owned
  std::vector<std::string> classes;  // label i names classes[i] (a Cache: manifest().classes);
                                     // empty: labels are not class indices (regression, no
                                     // labels) and pass through unchanged, which every source
                                     // of the mixture must then share
  std::string name;                  // for messages and per-source counts; "" = "source<k>";
                                     // unique within the mixture
  std::string identity;              // what the cache is (Python: its identity digest; the
                                     // trainer: its manifest checksum): part of fingerprint()
  double weight = -1;                // share of an epoch's samples (relative); -1 = unset
  double repeat = -1;                // passes over the source per epoch; -1 = unset
};

struct MixtureOptions {
  MixBatching batching = MixBatching::kRandom;  // default random
  uint64_t epoch_samples = 0;  // weights: samples per epoch, 0 = the sum of the sources' sizes;
                               // repeats: 0 or the sum of the counts
  uint64_t stratum = 0;        // kStratified: samples per global batch; 0 = the Loader's
                               // batch_size x world_size (the trainer passes its global batch;
                               // give it explicitly where the world size may change)
  std::vector<std::string> classes;  // the unified class list; empty = derived (the first
                                     // source's names in order, then each later source's new
                                     // names in its order). Given: every source's names must be
                                     // in it (a validation mixture uses the training list)
};

// Immutable and thread-safe once made; shares its sources.
class Mixture {
 public:
  // Checks the sources agree, all at once, and throws Error(kInvalidArgument) listing every
  // difference from source 0 by name: channels, fields (name, kind, dtype, shape, rows_of,
  // classes), encoded (JPEG) or not, classes present or not; and the shares: all weights or all
  // repeats (not both; neither = repeat 1 each), each finite in [0, 2^20], not all 0, a
  // non-empty source for every share > 0, names unique, no class named twice in a source's
  // list or the given one (a source of 0 samples and share 0 only adds its class names). Fixed
  // sources of different H x W, or any
  // ragged source, make the mixture ragged (the Loader then needs a crop to a fixed size).
  static std::shared_ptr<const Mixture> make(std::vector<MixSource> sources,
                                             const MixtureOptions& options = {});

  size_t sources() const;                           // K
  const MixSource& source(size_t k) const;          // as given, name filled in
  const MixtureOptions& options() const;            // as given, classes filled in
  const std::vector<std::string>& classes() const;  // unified
  // Source k's label remap: unified label of its local label l (empty when no classes).
  const std::vector<int64_t>& remap(size_t k) const;
  bool repeats() const;                         // shares are repeats (else weights)
  const std::vector<uint64_t>& shares() const;  // quantize_share() of each weight or repeat
  const std::vector<uint64_t>& counts() const;  // mix_counts(): samples per source per epoch
  uint64_t epoch_samples() const;               // their sum (E)
  // The counts of a stretch of `total` samples under these shares: largest_remainder by the
  // weights, or by counts() for repeats (the rest of an epoch after a weight change).
  std::vector<uint64_t> counts_for(uint64_t total) const;

  // The concatenation of the sources as one SampleSource: index offset(k) + i is source k's
  // sample i; labels unified; fields forwarded. Fixed with the common shape when every source
  // is fixed with one shape, else ragged (sample_shape forwarded). Shares the sources.
  std::shared_ptr<const SampleSource> view() const;
  uint64_t offset(size_t k) const;  // first view index of source k
  // (source, local index) of view index i.
  std::pair<uint32_t, uint64_t> locate(uint64_t i) const;

  // The plan mix_segment_order() needs, with kStratified's stratum resolved (options().stratum,
  // or `default_stratum` when that is 0).
  MixPlan plan(bool shuffle, uint64_t default_stratum) const;
  // A 64-bit digest of everything the order depends on: sizes, identities, names, shares
  // (quantized) and their kind, epoch_samples, batching and the resolved stratum. A saved
  // position resumes only under the same fingerprint (or with WeightChange::kContinue).
  uint64_t fingerprint(uint64_t stratum) const;
  // "a 0.7, b 0.3" or "a repeat 1, b repeat 3": the shares, for messages.
  std::string describe_shares() const;

  class Impl;
  explicit Mixture(std::unique_ptr<Impl> impl);
  ~Mixture();

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace dscache
