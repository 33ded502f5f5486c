// A Loader's epochs over a Mixture: which segment an epoch is, its entries cut for this rank,
// the transform keys, and the resume state (docs/SERVING.md "Mixing caches").
#include "serve/mix/mix_epoch.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "dscache/error.h"
#include "dscache/sampler.h"

namespace dscache {
namespace detail {
namespace {

Error invalid(const std::string& reason) { return Error(ErrorKind::kInvalidArgument, "", reason); }

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void check_sources(const std::vector<uint64_t>& v, size_t k, const char* what) {
  if (v.size() != k) {
    throw invalid(std::string("position.mix.") + what + " has " + std::to_string(v.size()) +
                  " sources, the mixture " + std::to_string(k));
  }
}

}  // namespace

MixEpoch::MixEpoch(std::shared_ptr<const Mixture> mixture, const LoaderOptions& options)
    : mixture_(std::move(mixture)), sampler_(options.sampler), direct_read_(options.direct_read) {
  if (sampler_.shuffle == Shuffle::kWindowed) {
    throw invalid(
        "mixture: shuffle \"windowed\" is not supported: random batching shuffles the whole "
        "mixed epoch, which undoes the windows, and stratified batching keeps one window of "
        "every source open at once, so the window no longer bounds memory; use shuffle "
        "\"global\", or serve a cache larger than memory alone");
  }
  plan_ = mixture_->plan(sampler_.shuffle != Shuffle::kNone,
                         uint64_t{options.batch_size} * sampler_.world_size);
  base_drawn_.assign(mixture_->sources(), 0);
  for (size_t k = 0; k < mixture_->sources(); ++k) {
    members_.push_back(&mixture_->source(k));
    remaps_.push_back(&mixture_->remap(k));
    offsets_.push_back(mixture_->offset(k));
  }
}

DirectReadDecision MixEpoch::direct_choice() const {
  return {false,
          std::string(kDirectReadNames.to_string(direct_read_)) + ": not applicable (mixture)"};
}

MixSegment MixEpoch::segment_for(uint64_t epoch) const {
  if (resumed_ && resumed_segment_.epoch == epoch) return resumed_segment_;
  if (epoch < base_epoch_) {
    throw invalid("start_epoch: epoch " + std::to_string(epoch) + " is before epoch " +
                  std::to_string(base_epoch_) +
                  ", where this Loader's resumed mixture continues its sources' streams");
  }
  MixSegment seg = pure_epoch(mixture_->counts(), epoch - base_epoch_);
  seg.epoch = epoch;
  for (size_t k = 0; k < seg.drawn.size(); ++k) seg.drawn[k] += base_drawn_[k];
  return seg;
}

void MixEpoch::start(uint64_t seed, uint64_t epoch, uint64_t first, uint64_t limit) {
  MixSegment seg = segment_for(epoch);
  const uint64_t e = length(), s = seg.start;
  if (first < limit && rank_position(sampler_, first) < std::min(s, e)) {
    throw invalid("epoch " + std::to_string(epoch) + " changed its mixture shares at sample " +
                  std::to_string(s) +
                  ": its samples before that cannot be served again; resume "
                  "at or after it");
  }
  global_ = e > s ? mix_segment_order(plan_, seg, seed) : std::vector<MixEntry>{};
  segment_ = std::move(seg);
  counted_.clear();
  const size_t k_count = mixture_->sources();
  prior_taken_.assign(k_count, 0);
  if (resumed_ && segment_.epoch == resumed_segment_.epoch) {
    // Taken before the segment: what the saved position had taken, less the segment's share.
    const MixState at = state(resumed_sample_);
    for (size_t k = 0; k < k_count; ++k) {
      const uint64_t in_segment = at.drawn[k] - segment_.drawn[k];
      prior_taken_[k] = resumed_taken_[k] > in_segment ? resumed_taken_[k] - in_segment : 0;
    }
  }
  const uint64_t per_rank = samples_per_rank(e, sampler_);
  rank_.assign(per_rank, MixEntry{});
  for (uint64_t k = 0; k < per_rank; ++k) {
    const uint64_t p = rank_position(sampler_, k);
    // kPad's tail repeats the segment's positions from its start.
    const uint64_t q = p < e ? p : (e > s ? s + (p - e) % (e - s) : 0);
    if (q < s || q >= e) continue;  // before the segment: never served
    rank_[k] = global_[q - s];
  }
}

MixState MixEpoch::state(uint64_t g) const {
  MixState st;
  st.fingerprint = fingerprint();
  st.segment = segment_.segment;
  st.segment_start = segment_.start;
  st.segment_drawn = segment_.drawn;
  // The segment's entries before g, per source: counted on from the last call when g moved
  // forward (a checkpoint per step costs the steps' samples, not the epoch's square).
  const uint64_t s = segment_.start, end = std::max(s, std::min(g, s + global_.size()));
  if (counted_.size() != segment_.drawn.size() || end < counted_to_) {
    counted_.assign(segment_.drawn.size(), 0);
    counted_to_ = s;
  }
  for (; counted_to_ < end; ++counted_to_) ++counted_[global_[counted_to_ - s].source];
  st.drawn = segment_.drawn;
  st.taken = prior_taken_;
  for (size_t k = 0; k < counted_.size(); ++k) {
    st.drawn[k] += counted_[k];
    st.taken[k] += counted_[k];
  }
  return st;
}

void MixEpoch::resume(const EpochPosition& pos, WeightChange change) {
  const size_t k_count = mixture_->sources();
  const MixState& m = pos.mix;
  const uint64_t e = length();
  MixSegment seg;
  seg.epoch = pos.epoch;
  if (m.fingerprint == fingerprint()) {
    check_sources(m.segment_drawn, k_count, "segment_drawn");
    check_sources(m.taken, k_count, "taken");
    seg.segment = m.segment;
    seg.start = m.segment_start;
    seg.counts = m.segment == 0 ? mixture_->counts()
                                : mixture_->counts_for(e > seg.start ? e - seg.start : 0);
    seg.drawn = m.segment_drawn;
  } else if (change == WeightChange::kRefuse) {
    throw invalid("resume: the position was saved under other mixture shares (fingerprint " +
                  hex(m.fingerprint) + "); this mixture's are " + mixture_->describe_shares() +
                  " (fingerprint " + hex(fingerprint()) +
                  "): pass WeightChange::kContinue to keep the samples taken and serve the "
                  "rest of the epoch under these shares");
  } else {
    // New shares: [0, G) stands; the rest of the epoch is a new segment from the saved streams.
    check_sources(m.drawn, k_count, "drawn");
    check_sources(m.taken, k_count, "taken");
    seg.segment = m.segment + 1;
    seg.start = pos.sample;
    seg.counts = mixture_->counts_for(e > pos.sample ? e - pos.sample : 0);
    seg.drawn = m.drawn;
  }
  resumed_ = true;
  resumed_segment_ = seg;
  resumed_taken_ = m.taken;
  resumed_sample_ = pos.sample;
  base_epoch_ = pos.epoch + 1;
  for (size_t k = 0; k < k_count; ++k) base_drawn_[k] = seg.drawn[k] + seg.counts[k];
}

}  // namespace detail
}  // namespace dscache
