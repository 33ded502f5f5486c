// A mixture's order: which source fills each global position of a segment, and which of that
// source's samples (mix_order.h; docs/SERVING.md "Mixing caches").
//
// Reproducibility contract, as in sampler.cpp: the orders made here are part of a run's identity
// (a resumed job, under any world size, must see the same samples in the same order), so the
// tags, the keys and the order of the draws below never change. tests/test_mix_order.cpp holds
// a golden order that fails if they do.
#include <algorithm>
#include <cassert>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "dscache/mix_order.h"
#include "dscache/sampler.h"
#include "serve/shuffle.h"

namespace dscache {

namespace {

// Stream tags (ASCII, big-endian packed), listed in sampler.h. Never renumber.
constexpr uint64_t kTagMixPass = 0x6d697870617373ull;      // "mixpass": pass permutation
constexpr uint64_t kTagMixShuffle = 0x6d697873687566ull;   // "mixshuf": segment 0's key
constexpr uint64_t kTagMixSegment = 0x6d6978736567ull;     // "mixseg": later segments' key
constexpr uint64_t kTagMixStrata = 0x6d69787374726174ull;  // "mixstrat": extras' rows to batches
constexpr uint64_t kTagMixBatch = 0x6d6978626174ull;       // "mixbat": within one batch

constexpr uint64_t kMaxPass = UINT32_MAX;  // MixEntry::pass is 32 bits

Error invalid(const std::string& reason) { return Error(ErrorKind::kInvalidArgument, "", reason); }

std::string source_name(size_t k) { return "source " + std::to_string(k); }

// The pass of stream position `stream` of source `k` (n > 0), refused past kMaxPass.
uint64_t pass_of(uint64_t n, size_t k, uint64_t stream) {
  const uint64_t pass = stream / n;
  if (pass > kMaxPass) {
    throw invalid(source_name(k) + ": stream position " + std::to_string(stream) +
                  " lies in pass " + std::to_string(pass) + ", past 2^32-1");
  }
  return pass;
}

// pi_{k,p}: the samples of source k's pass p in order (identity when !shuffle).
std::vector<uint64_t> pass_permutation(const MixPlan& plan, uint64_t seed, uint32_t k,
                                       uint64_t pass) {
  const uint64_t n = plan.sizes[k];
  std::vector<uint64_t> perm(n);
  std::iota(perm.begin(), perm.end(), uint64_t{0});
  if (plan.shuffle) {
    Rng rng(seed, stream_id(kTagMixPass, k, pass));
    shuffle(perm.data(), n, rng);
  }
  return perm;
}

// Throws Error(kInvalidArgument) naming what the plan and segment get wrong; returns the
// segment's length.
uint64_t check_segment(const MixPlan& plan, const MixSegment& seg) {
  const size_t sources = plan.sizes.size();
  if (seg.counts.size() != sources || seg.drawn.size() != sources) {
    throw invalid("mixture order: segment.counts has " + std::to_string(seg.counts.size()) +
                  " entries and segment.drawn " + std::to_string(seg.drawn.size()) + " for " +
                  std::to_string(sources) + " sources (plan.sizes)");
  }
  if (sources > kMaxPass) throw invalid("mixture order: more than 2^32-1 sources");
  if (plan.batching != MixBatching::kRandom && plan.batching != MixBatching::kStratified) {
    throw invalid("mixture order: plan.batching has an unknown value");
  }
  if (plan.batching == MixBatching::kStratified && plan.stratum == 0) {
    throw invalid("mixture order: plan.stratum must be >= 1 with stratified batching");
  }
  uint64_t length = 0;
  for (size_t k = 0; k < sources; ++k) {
    const uint64_t count = seg.counts[k];
    if (count == 0) continue;
    if (plan.sizes[k] == 0) {
      throw invalid("mixture order: " + source_name(k) + " holds no samples but segment.counts[" +
                    std::to_string(k) + "] = " + std::to_string(count));
    }
    if (seg.drawn[k] > UINT64_MAX - count) {
      throw invalid("mixture order: " + source_name(k) + ": segment.drawn + segment.counts " +
                    "overflows 64 bits");
    }
    pass_of(plan.sizes[k], k, seg.drawn[k] + count - 1);  // the last draw's pass
    if (length > UINT64_MAX - count || seg.start > UINT64_MAX - length - count) {
      throw invalid("mixture order: the segment's positions overflow 64 bits");
    }
    length += count;
  }
  return length;
}

// The key every shuffle of the segment derives from: stream_id("mixshuf", epoch) for segment 0,
// stream_id("mixseg", epoch, segment) after a weight change.
uint64_t segment_key(const MixSegment& seg) {
  return seg.segment == 0 ? stream_id(kTagMixShuffle, seg.epoch)
                          : stream_id(kTagMixSegment, seg.epoch, seg.segment);
}

// Appends `copies[k]` copies of k, for each k in order.
void append_sorted(std::vector<uint64_t>& out, const std::vector<uint64_t>& copies) {
  for (size_t k = 0; k < copies.size(); ++k) out.insert(out.end(), copies[k], uint64_t{k});
}

// Random batching: the counts' multiset, shuffled once with Rng(seed, key).
std::vector<uint64_t> random_sources(const MixPlan& plan, const MixSegment& seg, uint64_t seed,
                                     uint64_t length) {
  std::vector<uint64_t> sources;
  sources.reserve(length);
  append_sorted(sources, seg.counts);
  if (plan.shuffle) {
    Rng rng(seed, segment_key(seg));
    shuffle(sources.data(), length, rng);
  }
  return sources;
}

// Stratified batching. The segment's J = length / B full batches of B = plan.stratum positions
// (counted from seg.start) take F = largest_remainder(J x B, counts) together; the tail batch
// (length mod B positions) takes the rest, t_k = counts_k - F_k. That is never negative: F_k is
// the floor or the ceiling of J x B x counts_k / length <= counts_k, and counts_k is whole.
// Each full batch takes a_k = F_k / J of source k, plus r = B - sum a_k extras: a J x r grid,
// filled column-major with x_0 = F_0 mod J cells of source 0, then x_1 of source 1, ... (a run
// of fewer than J cells meets no row twice, so a row's r extras are r distinct sources, and
// every source's count in a batch is the floor or the ceiling of B x F_k / (J x B)). Batch j
// takes row rows[j], rows a shuffle of 0..J-1 with Rng(seed, stream_id("mixstrat", key)); batch
// j's sources (tail: j = J) are shuffled with Rng(seed, stream_id("mixbat", key, j)). Without
// plan.shuffle nothing is shuffled: batch j takes row j, its sources in source order.
std::vector<uint64_t> stratified_sources(const MixPlan& plan, const MixSegment& seg, uint64_t seed,
                                         uint64_t length) {
  const uint64_t b = plan.stratum, full = length / b;
  const size_t sources = seg.counts.size();
  const uint64_t key = segment_key(seg);
  std::vector<uint64_t> out;
  out.reserve(length);
  std::vector<uint64_t> tail = seg.counts;
  if (full > 0) {
    const std::vector<uint64_t> f = largest_remainder(full * b, seg.counts);
    std::vector<uint64_t> base(sources);
    uint64_t per_batch = 0;
    for (size_t k = 0; k < sources; ++k) {
      assert(f[k] <= seg.counts[k]);
      tail[k] -= f[k];
      base[k] = f[k] / full;
      per_batch += base[k];
    }
    const uint64_t r = b - per_batch;        // sum x_k = J x b - J x per_batch: exactly J x r cells
    std::vector<uint64_t> extras(full * r);  // row i: extras[i*r, (i+1)*r), in source order
    uint64_t cell = 0;
    for (size_t k = 0; k < sources; ++k) {
      for (uint64_t x = f[k] % full; x > 0; --x, ++cell)
        extras[(cell % full) * r + cell / full] = k;
    }
    assert(cell == full * r);
    std::vector<uint64_t> rows(full);
    std::iota(rows.begin(), rows.end(), uint64_t{0});
    if (plan.shuffle) {
      Rng rng(seed, stream_id(kTagMixStrata, key));
      shuffle(rows.data(), full, rng);
    }
    std::vector<uint64_t> copies(sources);
    for (uint64_t j = 0; j < full; ++j) {
      copies = base;
      for (uint64_t i = 0; i < r; ++i) ++copies[extras[rows[j] * r + i]];
      append_sorted(out, copies);
    }
  }
  append_sorted(out, tail);
  assert(out.size() == length);
  if (plan.shuffle) {
    for (uint64_t j = 0; j * b < length; ++j) {
      Rng rng(seed, stream_id(kTagMixBatch, key, j));
      const uint64_t first = j * b;
      shuffle(out.data() + first, std::min(b, length - first), rng);
    }
  }
  return out;
}

}  // namespace

uint64_t mix_stream_sample(const MixPlan& plan, uint64_t seed, uint32_t source, uint64_t stream) {
  if (source >= plan.sizes.size()) {
    throw invalid("mix_stream_sample: source " + std::to_string(source) + " of " +
                  std::to_string(plan.sizes.size()) + " sources");
  }
  const uint64_t n = plan.sizes[source];
  if (n == 0) throw invalid("mix_stream_sample: " + source_name(source) + " holds no samples");
  const uint64_t pass = pass_of(n, source, stream);
  if (!plan.shuffle) return stream % n;
  return pass_permutation(plan, seed, source, pass)[stream % n];
}

std::vector<MixEntry> mix_segment_order(const MixPlan& plan, const MixSegment& seg, uint64_t seed) {
  const uint64_t length = check_segment(plan, seg);
  const std::vector<uint64_t> sources = plan.batching == MixBatching::kStratified
                                            ? stratified_sources(plan, seg, seed, length)
                                            : random_sources(plan, seg, seed, length);
  // Draws in position order: each position takes its source's next stream position, so the
  // first m positions' draws are, per source, a prefix of the segment's. A source's positions
  // climb its stream, so one permutation per source (its current pass) is held at a time and
  // each pass touched is built once.
  const size_t count = plan.sizes.size();
  std::vector<uint64_t> next = seg.drawn;
  std::vector<uint64_t> held_pass(count, UINT64_MAX);
  std::vector<std::vector<uint64_t>> perms(count);
  std::vector<MixEntry> entries(length);
  for (uint64_t i = 0; i < length; ++i) {
    const uint32_t k = static_cast<uint32_t>(sources[i]);
    const uint64_t n = plan.sizes[k], s = next[k]++;
    const uint64_t pass = s / n;  // <= 2^32-1: check_segment checked the last draw
    if (plan.shuffle && held_pass[k] != pass) {
      perms[k] = pass_permutation(plan, seed, k, pass);
      held_pass[k] = pass;
    }
    entries[i] = MixEntry{k, static_cast<uint32_t>(pass), plan.shuffle ? perms[k][s % n] : s % n};
  }
  return entries;
}

MixSegment pure_epoch(const std::vector<uint64_t>& counts, uint64_t epoch) {
  MixSegment seg;
  seg.epoch = epoch;
  seg.counts = counts;
  seg.drawn.reserve(counts.size());
  for (size_t k = 0; k < counts.size(); ++k) {
    if (counts[k] != 0 && epoch > UINT64_MAX / counts[k]) {
      throw invalid("pure_epoch: epoch " + std::to_string(epoch) + " x the count of " +
                    source_name(k) + " overflows 64 bits");
    }
    seg.drawn.push_back(epoch * counts[k]);
  }
  return seg;
}

}  // namespace dscache
