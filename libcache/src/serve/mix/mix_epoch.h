// Private: a Loader's epochs over a Mixture — the segment in force for each epoch, its global
// entries (mix_order.h), this rank's share of them as view indices, the per-sample transform
// keys, and the MixState that saves it all (epoch_position / resume).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dscache/direct_read.h"
#include "dscache/loader.h"
#include "dscache/mix_order.h"
#include "dscache/mixture.h"

namespace dscache {
namespace detail {

// Made by the Loader's Impl (copyable: resume() keeps a copy to put back when it fails); used only
// while its prefetcher is stopped (rank_order, resume) or read by fills (entry, xform_key) while
// the epoch's order stands.
class MixEpoch {
 public:
  // Refuses the windowed shuffle by name (docs/SERVING.md "Mixing caches").
  MixEpoch(std::shared_ptr<const Mixture> mixture, const LoaderOptions& options);

  const std::shared_ptr<const Mixture>& mixture() const { return mixture_; }
  uint64_t length() const { return mixture_->epoch_samples(); }  // E
  // direct_read never applies to a mixture: "<setting>: not applicable (mixture)".
  DirectReadDecision direct_choice() const;

  // Builds epoch `epoch`'s order (the resumed segment when it is that epoch, else pure from the
  // base) and returns this rank's samples_per_rank(E) positions as view indices; kPad's tail
  // repeats positions from the segment's start. Throws Error(kInvalidArgument) for an epoch
  // before the base, or when rank sample `first` (< `limit`, the rank's served samples) lies
  // before the segment's start (those positions were served under other shares).
  std::vector<uint64_t> rank_order(uint64_t seed, uint64_t epoch, uint64_t first, uint64_t limit);
  // Rank position k's entry, and the key its transform draws with (source, pass, sample:
  // different for each pass, the same on every world size).
  const MixEntry& entry(uint64_t k) const { return rank_[k]; }
  uint64_t xform_key(uint64_t k) const;

  uint64_t fingerprint() const { return mixture_->fingerprint(plan_.stratum); }
  // The built epoch's MixState at global cursor g. Not thread-safe (the consumer's thread).
  MixState state(uint64_t g) const;
  // resume(): takes pos's segment (same fingerprint) or starts a new one at pos.sample under
  // this mixture's shares (kContinue); the next start of pos.epoch builds it. Throws
  // Error(kInvalidArgument) naming the old fingerprint and the new shares when refused.
  void resume(const EpochPosition& pos, WeightChange change);

 private:
  MixSegment segment_for(uint64_t epoch) const;

  std::shared_ptr<const Mixture> mixture_;
  SamplerOptions sampler_;
  DirectRead direct_read_;
  MixPlan plan_;
  // Where later epochs' streams continue: epoch base_epoch_ draws from base_drawn_.
  uint64_t base_epoch_ = 0;
  std::vector<uint64_t> base_drawn_;
  // A resumed epoch's segment, and the taken counts saved at resumed_sample_ (none: no resume).
  bool resumed_ = false;
  MixSegment resumed_segment_;
  std::vector<uint64_t> resumed_taken_;
  uint64_t resumed_sample_ = 0;
  // The built epoch.
  MixSegment segment_;
  std::vector<MixEntry> global_;       // positions [segment_.start, E)
  std::vector<uint64_t> prior_taken_;  // per source: taken before segment_.start
  std::vector<MixEntry> rank_;         // this rank's positions
  // state()'s running count: per source, the segment's entries in [segment_.start, counted_to_).
  mutable std::vector<uint64_t> counted_;
  mutable uint64_t counted_to_ = 0;
};

}  // namespace detail
}  // namespace dscache
