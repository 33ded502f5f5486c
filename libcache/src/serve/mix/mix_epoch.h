// Private: a Loader's epochs over a Mixture — the segment in force for each epoch, its global
// entries (mix_order.h), this rank's share of them as view indices, the per-sample transform
// keys, and the MixState that saves it all (epoch_position / resume).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "dscache/direct_read.h"
#include "dscache/loader.h"
#include "dscache/mix_order.h"
#include "dscache/mixture.h"
#include "dscache/sampler.h"
#include "serve/mix/mixture_view.h"

namespace dscache {
namespace detail {

// Made by the Loader's Impl (resume() keeps a copy of resumed() to put back when it fails); used
// only while its prefetcher is stopped (start, resume) or read by fills (entry, xform_key)
// while the epoch's order stands.
class MixEpoch {
 public:
  // Refuses the windowed shuffle by name (docs/SERVING.md "Mixing caches").
  MixEpoch(std::shared_ptr<const Mixture> mixture, const LoaderOptions& options);

  const std::shared_ptr<const Mixture>& mixture() const { return mixture_; }
  uint64_t length() const { return mixture_->epoch_samples(); }  // E
  // direct_read never applies to a mixture: "<setting>: not applicable (mixture)".
  DirectReadDecision direct_choice() const;

  // Builds epoch `epoch`'s order (the resumed segment when it is that epoch, else pure from the
  // base) and this rank's samples_per_rank(E) entries, in one pass over the rank's positions;
  // kPad's tail repeats positions from the segment's start. Throws Error(kInvalidArgument) for
  // an epoch before the base, or when rank sample `first` (< `limit`, the rank's served samples)
  // lies before the segment's start (those positions were served under other shares).
  void start(uint64_t seed, uint64_t epoch, uint64_t first, uint64_t limit);
  // Rank position k's entry: fills read its source's sample directly (source(), label()), never
  // through the view's locate.
  const MixEntry& entry(uint64_t k) const { return rank_[k]; }
  const SampleSource& source(uint32_t k) const { return *members_[k]->source; }
  // The entry's label in the mixture's classes (mix_unify_label).
  int64_t label(const MixEntry& e) const {
    const MixSource& m = *members_[e.source];
    return mix_unify_label(m, *remaps_[e.source], e.local, m.source->label(e.local));
  }
  // The key the entry's transform draws with (source, pass, sample: different for each pass,
  // the same on every world size).
  uint64_t xform_key(const MixEntry& e) const {
    return stream_id(kTagMixDraw, offsets_[e.source] + e.local, e.pass);
  }

  uint64_t fingerprint() const { return mixture_->fingerprint(plan_.stratum); }
  // The built epoch's MixState at global cursor g. Not thread-safe (the consumer's thread).
  MixState state(uint64_t g) const;
  // resume(): takes pos's segment (same fingerprint) or starts a new one at pos.sample under
  // this mixture's shares (kContinue); the next start of pos.epoch builds it. Throws
  // Error(kInvalidArgument) naming the old fingerprint and the new shares when refused.
  void resume(const EpochPosition& pos, WeightChange change);

  // All resume() changes (O(sources), not the built epoch): the Loader keeps a copy and puts it
  // back when it refuses the position after resume() took it. A failed rebuild leaves the
  // Loader unstarted, and the next start rebuilds the epoch from these.
  struct Resumed {
    // Where later epochs' streams continue: epoch base_epoch draws from base_drawn.
    uint64_t base_epoch = 0;
    std::vector<uint64_t> base_drawn;
    // A resumed epoch's segment, and the taken counts saved at `sample` (none: no resume).
    bool resumed = false;
    MixSegment segment;
    std::vector<uint64_t> taken;
    std::vector<uint64_t> drawn;  // checked against the order when it is built
    uint64_t sample = 0;
  };
  const Resumed& resumed() const { return r_; }
  void put_back(Resumed r) { r_ = std::move(r); }

 private:
  MixSegment segment_for(uint64_t epoch) const;

  // "mixdraw": a mixture sample's transform key, stream_id(tag, view index, pass).
  static constexpr uint64_t kTagMixDraw = 0x6d697864726177ull;

  std::shared_ptr<const Mixture> mixture_;
  // Per source, read by every fill: the member, its label remap and first view index.
  std::vector<const MixSource*> members_;
  std::vector<const std::vector<int64_t>*> remaps_;
  std::vector<uint64_t> offsets_;
  SamplerOptions sampler_;
  DirectRead direct_read_;
  MixPlan plan_;
  Resumed r_;
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
