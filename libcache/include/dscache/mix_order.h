// The order of a mixture of caches: how many samples each source gives an epoch, and which
// sample fills each global position. Pure functions of (sizes, weights, seed, epoch): nothing
// here depends on ranks, workers or batch sizes (stratified batching's stratum is the run's
// global batch, which elastic resume keeps). docs/SERVING.md "Mixing caches".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dscache/enum_table.h"

namespace dscache {

// How the sources' samples are spread over an epoch.
enum class MixBatching {
  kRandom,      // one shuffle of the epoch's mixed sequence: exact totals per epoch, each batch's
                // share only in expectation
  kStratified,  // every global batch of `stratum` samples holds each source's share (floor or
                // ceil of stratum x count / epoch), the rounding carried so the epoch's totals
                // stay exact; the batch's positions are shuffled
};
// "random", "stratified".
extern const EnumTable<MixBatching> kMixBatchingNames;

// A weight or repeat as the order uses it: llround(value x 2^32), the same on every platform
// (0.7 and 0.3 sum to exactly 2^32). Throws Error(kInvalidArgument) naming `what` unless value
// is finite, >= 0 and <= 2^20.
uint64_t quantize_share(double value, const std::string& what);

// Hamilton's largest remainder: `total` split in proportion to `quotas` (not all zero), each
// part floor(total x q / sum) plus one for the (total - sum of floors) largest remainders, ties
// to the lower index. The parts sum to `total` exactly. 128-bit arithmetic: no overflow for
// total < 2^64 and quotas < 2^53.
std::vector<uint64_t> largest_remainder(uint64_t total, const std::vector<uint64_t>& quotas);

// The samples each source gives one epoch.
//   repeats: count_k = round(size_k x repeat_k) (half up, on the quantized repeat); the epoch is
//     their sum (`epoch_samples` must be 0 or equal to it).
//   weights: the epoch is `epoch_samples` (0 = the sum of the sizes), split by
//     largest_remainder over the quantized weights.
// `shares_q` are quantize_share() values, one per source. Throws Error(kInvalidArgument) naming
// the source (by index) when a source of size 0 would give samples, or when all shares are 0.
std::vector<uint64_t> mix_counts(const std::vector<uint64_t>& sizes,
                                 const std::vector<uint64_t>& shares_q, bool repeats,
                                 uint64_t epoch_samples);

// What the order needs of a mixture.
struct MixPlan {
  std::vector<uint64_t> sizes;  // samples in each source (n_k)
  MixBatching batching = MixBatching::kRandom;
  uint64_t stratum = 0;  // kStratified: samples per global batch, >= 1
  bool shuffle = true;   // false (Shuffle::kNone): each pass walks its source in storage order
                         // and the mixed sequence is not shuffled (stratified batches still hold
                         // their shares, their positions unshuffled)
};

// A stretch of one epoch under one set of counts: the whole epoch (segment 0, start 0), or the
// rest of an epoch after its weights changed at a checkpoint (segment s > 0 from position start).
struct MixSegment {
  uint64_t epoch = 0;
  uint32_t segment = 0;          // 0: the epoch from its first position
  uint64_t start = 0;            // global position of the segment's first sample
  std::vector<uint64_t> counts;  // per source: samples in the segment (sum: its length)
  std::vector<uint64_t> drawn;   // per source: stream position of its first draw
};

// One global position: source `source`'s sample `local`, drawn in that source's pass `pass`.
struct MixEntry {
  uint32_t source = 0;
  uint32_t pass = 0;
  uint64_t local = 0;
};

// Each source is an endless stream of passes: stream position s is pass s / n_k, sample
// pi_{k,p}[s mod n_k], pi a Fisher-Yates permutation drawn from Rng(seed, stream_id("mixpass",
// k, p)) (identity when !plan.shuffle). No sample repeats within a pass, across epochs too.
uint64_t mix_stream_sample(const MixPlan& plan, uint64_t seed, uint32_t source, uint64_t stream);

// The segment's positions [seg.start, seg.start + sum(seg.counts)), in order. First the source
// of every position is chosen (random: the counts' multiset shuffled with Rng(seed, key);
// stratified: per batch of plan.stratum positions counted from seg.start, then shuffled within
// the batch), then each position takes its source's next stream draw in position order, so the
// draws the first m positions took are, per source, a prefix of the segment's draws. The key
// is stream_id("mixshuf", epoch) for segment 0 and stream_id("mixseg", epoch, segment) after.
// Stratified draws from Rng(seed, stream_id("mixstrat", key)) (which full batch takes which
// source's extra sample) and Rng(seed, stream_id("mixbat", key, j)) (batch j's positions); with
// !plan.shuffle none of these shuffles happens. Throws Error(kInvalidArgument) naming the field
// or source: counts or drawn not one per source, counts > 0 for an empty source, stratum 0 with
// kStratified, a draw past pass 2^32-1.
// Cost: O(length + sum of n_k over the passes touched) time, 16 bytes per position.
std::vector<MixEntry> mix_segment_order(const MixPlan& plan, const MixSegment& seg,
                                        uint64_t seed);

// Epoch `epoch` of a mixture whose weights never changed: segment 0, counts `counts`, source k's
// draws starting at stream position epoch x counts[k].
MixSegment pure_epoch(const std::vector<uint64_t>& counts, uint64_t epoch);

}  // namespace dscache
