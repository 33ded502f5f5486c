// A Loader's epochs over a Mixture: which segment an epoch is, its entries cut for this rank,
// the transform keys, and the resume state (docs/SERVING.md "Mixing caches").
#include "serve/mix/mix_epoch.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "dscache/error.h"
#include "dscache/sampler.h"
#include "serve/physical_memory.h"

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

std::string list(const std::vector<uint64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i > 0 ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

// The epoch's order is built whole (mix_segment_order: an entry and a source number per
// position; the rank's entries and view indices): refused up front, by epoch_samples, when that
// is more than this machine's memory, never a failed allocation at start_epoch().
void check_order_memory(const Mixture& m, uint32_t world_size) {
  __extension__ typedef unsigned __int128 u128;
  constexpr uint64_t kPerPosition = sizeof(MixEntry) + sizeof(uint64_t);
  const uint64_t e = m.epoch_samples(), per_rank = e / std::max<uint32_t>(world_size, 1) + 1;
  const u128 bytes = (u128{e} + per_rank) * kPerPosition;
  const uint64_t memory = physical_memory_bytes();
  if (bytes > memory) {
    const std::string b =
        bytes > UINT64_MAX ? "more than 2^64" : std::to_string(static_cast<uint64_t>(bytes));
    throw invalid("mixture: epoch_samples " + std::to_string(e) + ": the epoch's order takes " + b +
                  " bytes (" + std::to_string(kPerPosition) + " a position, and " +
                  std::to_string(kPerPosition) +
                  " a position of this rank), more than this machine's memory (" +
                  std::to_string(memory) + " bytes); lower epoch_samples or the repeats");
  }
}

// The saved MixState's own consistency, before anything uses it (a tampered or foreign state is
// refused by the key it gets wrong): one entry per source; stream positions inside pass 2^32-1
// (none for an empty source); per source segment_drawn <= drawn, the segment's draws
// (drawn - segment_drawn) among the samples taken, taken <= drawn; the taken counts summing to
// the samples taken (max(sample, segment_start): an epoch that new shares ended before the
// position); with the shares in force (`same`), a segment that starts at 0 when it is the
// epoch's first and at or before the position unless the epoch is over (sample == e).
void check_state(const Mixture& mix, const EpochPosition& pos, bool same, uint64_t e) {
  const MixState& m = pos.mix;
  const size_t k_count = mix.sources();
  check_sources(m.segment_drawn, k_count, "segment_drawn");
  check_sources(m.drawn, k_count, "drawn");
  check_sources(m.taken, k_count, "taken");
  __extension__ typedef unsigned __int128 u128;
  u128 sum = 0;
  for (size_t k = 0; k < k_count; ++k) {
    const uint64_t n = mix.source(k).source->size();
    const std::string at = "[" + std::to_string(k) + "] (" + mix.source(k).name + ")";
    const std::pair<const char*, uint64_t> streams[] = {{"drawn", m.drawn[k]},
                                                        {"segment_drawn", m.segment_drawn[k]}};
    for (const auto& [key, v] : streams) {
      if (n == 0 ? v != 0 : v / n > UINT32_MAX) {
        throw invalid("position.mix." + std::string(key) + at + " = " + std::to_string(v) +
                      (n == 0 ? ", but the source holds no samples"
                              : " lies in pass " + std::to_string(v / n) + " of its " +
                                    std::to_string(n) + " samples, past 2^32-1"));
      }
    }
    if (m.drawn[k] < m.segment_drawn[k]) {
      throw invalid("position.mix.drawn" + at + " " + std::to_string(m.drawn[k]) +
                    " < segment_drawn " + std::to_string(m.segment_drawn[k]) +
                    ": a stream does not go back");
    }
    if (m.drawn[k] - m.segment_drawn[k] > m.taken[k] || m.taken[k] > m.drawn[k]) {
      throw invalid("position.mix.taken" + at + " " + std::to_string(m.taken[k]) +
                    " does not fit the draws: at least the segment's " +
                    std::to_string(m.drawn[k] - m.segment_drawn[k]) + " draws, at most drawn " +
                    std::to_string(m.drawn[k]));
    }
    sum += m.taken[k];
  }
  if (same) {
    if (pos.sample > e) {
      throw invalid("position.sample " + std::to_string(pos.sample) + " > the epoch's " +
                    std::to_string(e) + " samples");
    }
    if (m.segment == 0 && m.segment_start != 0) {
      throw invalid("position.mix.segment_start " + std::to_string(m.segment_start) +
                    " with segment 0: an epoch's first segment starts at 0");
    }
    if (m.segment_start > pos.sample && pos.sample < e) {
      throw invalid("position.mix.segment_start " + std::to_string(m.segment_start) +
                    " > position.sample " + std::to_string(pos.sample) +
                    ": the shares in force took effect after the position");
    }
  }
  const uint64_t taken = std::max(pos.sample, m.segment_start);
  if (sum != taken) {
    throw invalid("position.mix.taken sums to " +
                  (sum > UINT64_MAX ? std::string("more than 2^64")
                                    : std::to_string(static_cast<uint64_t>(sum))) +
                  ", not position.sample " + std::to_string(pos.sample) +
                  (taken != pos.sample ? " (segment_start " + std::to_string(taken) + ")" : "") +
                  ": every sample taken is one source's");
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
  check_order_memory(*mixture_, sampler_.world_size);
  r_.base_drawn.assign(mixture_->sources(), 0);
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
  if (r_.resumed && r_.segment.epoch == epoch) return r_.segment;
  if (epoch < r_.base_epoch) {
    throw invalid("start_epoch: epoch " + std::to_string(epoch) + " is before epoch " +
                  std::to_string(r_.base_epoch) +
                  ", where this Loader's resumed mixture continues its sources' streams");
  }
  MixSegment seg = pure_epoch(mixture_->counts(), epoch - r_.base_epoch);
  seg.epoch = epoch;
  for (size_t k = 0; k < seg.drawn.size(); ++k) {
    // A wrapped sum would be a small, valid-looking stream position: refused, not served.
    if (seg.drawn[k] > UINT64_MAX - r_.base_drawn[k]) {
      throw invalid("start_epoch: epoch " + std::to_string(epoch) + ": source " +
                    mixture_->source(k).name + "'s stream position overflows 64 bits");
    }
    seg.drawn[k] += r_.base_drawn[k];
  }
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
  if (r_.resumed && segment_.epoch == r_.segment.epoch) {
    // Taken before the segment: what the saved position had taken, less the segment's share.
    // The saved drawn must be where the segment's order stands at the position (check_state
    // made taken >= drawn - segment_drawn, so no count goes below 0).
    const MixState at = state(r_.sample);
    if (at.drawn != r_.drawn) {
      throw invalid("position.mix.drawn " + list(r_.drawn) +
                    " is not where the "
                    "segment's order stands at position.sample " +
                    std::to_string(r_.sample) + " (" + list(at.drawn) +
                    "): the position was not saved by this mixture's order");
    }
    for (size_t k = 0; k < k_count; ++k) {
      prior_taken_[k] = r_.taken[k] - (at.drawn[k] - segment_.drawn[k]);
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
  if (m.segment_drawn.empty() && m.drawn.empty() && m.taken.empty()) {
    throw invalid(
        "position.mix is empty: the position was saved by a Loader over a single "
        "source (or without its mixture part); this Loader serves a mixture of " +
        mixture_->describe_shares());
  }
  const bool same = m.fingerprint == fingerprint();
  MixSegment seg;
  seg.epoch = pos.epoch;
  if (same) {
    check_state(*mixture_, pos, true, e);
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
    check_state(*mixture_, pos, false, e);
    if (m.segment == UINT32_MAX) {
      throw invalid("position.mix.segment " + std::to_string(m.segment) +
                    ": no further weight change fits in this epoch");
    }
    seg.segment = m.segment + 1;
    seg.start = pos.sample;
    seg.counts = mixture_->counts_for(e > pos.sample ? e - pos.sample : 0);
    seg.drawn = m.drawn;
  }
  r_.resumed = true;
  r_.segment = seg;
  r_.taken = m.taken;
  r_.drawn = m.drawn;
  r_.sample = pos.sample;
  r_.base_epoch = pos.epoch + 1;
  for (size_t k = 0; k < k_count; ++k) r_.base_drawn[k] = seg.drawn[k] + seg.counts[k];
}

}  // namespace detail
}  // namespace dscache
