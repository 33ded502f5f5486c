// The order in which one rank visits samples in one epoch: shuffling and rank sharding.
#pragma once

#include <cstdint>
#include <vector>

#include "dscache/enum_table.h"

namespace dscache {

enum class Shuffle {
  kNone,      // storage order
  kGlobal,    // a uniform permutation of all samples
  kWindowed,  // storage blocks in random order; samples shuffled within windows of blocks
              // (the Loader sizes both in stored bytes by default: see SamplerOptions)
};

// What happens to the samples that do not divide evenly among ranks.
enum class RankTail {
  kPad,   // repeat samples from the start of the epoch's order so every rank gets as many
          // (every sample is seen at least once; a few twice) — PyTorch DistributedSampler's way
  kDrop,  // drop the last (n mod world_size) samples of the order (each sample at most once)
};

// "none", "global", "windowed"; "pad", "drop".
extern const EnumTable<Shuffle> kShuffleNames;
extern const EnumTable<RankTail> kRankTailNames;

// kWindowed's block and window are defined in samples (block, window_blocks): epoch_order uses
// nothing else. They can instead be sized in stored bytes (block 0, block_bytes, window_bytes):
// resolve_window() turns bytes into samples, and the Loader calls it with the source's stored
// bytes per sample and available_memory_bytes(). An auto-sized window depends on the machine,
// so save the resolved options (Loader::sampler_options()) with a checkpoint and pass them
// back on resume: explicit block and window_blocks give the same order everywhere.
struct SamplerOptions {
  Shuffle shuffle = Shuffle::kGlobal;  // see Shuffle; default global
  uint64_t block = 0;          // kWindowed: samples per storage block; 0 = sized from block_bytes
                               // by resolve_window() (epoch_order alone: whole cache is 1 block)
  uint64_t window_blocks = 4;  // kWindowed: blocks whose samples are shuffled together; >= 1
                               // (a window is window_blocks consecutive blocks of the shuffled
                               // block order: window_blocks*block samples); with block 0,
                               // resolve_window() replaces it from window_bytes
  uint64_t block_bytes = 0;    // kWindowed, block 0: stored bytes per block, rounded down to whole
                               // samples (at least 1); 0 = kDefaultBlockBytes (4 MiB)
  uint64_t window_bytes = 0;   // kWindowed, block 0: stored bytes per window, rounded down to whole
                               // blocks (at least 1); 0 = default_window_bytes(available memory)
  uint32_t rank = 0;           // this process's rank, < world_size
  uint32_t world_size = 1;     // number of ranks sharing the epoch
  RankTail tail = RankTail::kPad;  // see RankTail
};

// A block of this many stored bytes is read as one sequential run (hundreds of samples of a
// small image, tens of 224-px ones) yet leaves many blocks in a window.
constexpr uint64_t kDefaultBlockBytes = uint64_t{4} << 20;

// The auto window: a quarter of `available_bytes` (the window being served and the next one,
// read ahead, both sit in the page cache, with room to spare), clamped to [64 MiB, 4 GiB].
uint64_t default_window_bytes(uint64_t available_bytes);

// `options` with kWindowed's byte sizes turned into samples, for a source of `n` samples stored
// in `stored_sample_bytes` bytes each (>= 1 used): when options.shuffle is kWindowed and block
// is 0, block = clamp(block_bytes / stored_sample_bytes, 1, n) and window_blocks =
// clamp(window_bytes / (block * stored_sample_bytes), 1, blocks in the cache), with the defaults
// above for zeros
// (`available_bytes` feeds default_window_bytes); block_bytes and window_bytes then report the
// resolved sizes. Any other options are returned unchanged.
SamplerOptions resolve_window(const SamplerOptions& options, uint64_t n,
                              uint64_t stored_sample_bytes, uint64_t available_bytes);

// Throws Error(kInvalidArgument) naming the field (rank >= world_size, window_blocks 0, ...).
void validate(const SamplerOptions& options, uint64_t n);

// Samples per rank per epoch: ceil(n / world) with kPad, floor(n / world) with kDrop.
uint64_t samples_per_rank(uint64_t n, const SamplerOptions& options);

// The rank split, one rule for every reader of an epoch's global order (epoch_order, the
// read-ahead windows, the direct-read windows): rank r's k-th sample is global position
// r + k*world. A position p >= n (kPad's tail) stands for position padded_position(n, p).
uint64_t rank_position(const SamplerOptions& options, uint64_t k);
// kPad's tail: position p >= n of an epoch of n samples repeats position (p - n) mod n.
uint64_t padded_position(uint64_t n, uint64_t p);
// How many of rank `options.rank`'s positions lie below global position g (the first k with
// rank_position(options, k) >= g).
uint64_t rank_positions_below(const SamplerOptions& options, uint64_t g);

// The sample indices rank `options.rank` visits in epoch `epoch`, in order. A pure function of
// (n, options, seed, epoch): independent of batch size, worker count and timing, identical on
// every platform (own PRNG and own bounded-integer sampling, not <random>'s distributions).
// Rank r takes positions r, r + world, r + 2*world, ... of the epoch's global order.
std::vector<uint64_t> epoch_order(uint64_t n, const SamplerOptions& options, uint64_t seed,
                                  uint64_t epoch);

// kWindowed: the storage blocks in the order epoch `epoch` visits them (block b holds samples
// [b*block, min((b+1)*block, n))); window w is entries [w*window_blocks, (w+1)*window_blocks).
// The same draws epoch_order makes, exposed so a reader can read ahead the blocks of the next
// window. Empty for other shuffles.
std::vector<uint64_t> epoch_blocks(uint64_t n, const SamplerOptions& options, uint64_t seed,
                                   uint64_t epoch);

// The order `dscache build --shuffle SEED` stores a source's `n` listed entries in: position k of
// the cache holds entry order[k]. A Fisher–Yates permutation drawn from
// Rng(seed, stream_id("build", n)) (docs/FORMAT.md); fixed forever, like epoch_order.
std::vector<uint64_t> build_order(uint64_t n, uint64_t seed);

// A small counter-based generator (SplitMix64 stream): the same (seed, stream) always yields the
// same numbers. Used for shuffles and per-sample random transforms.
class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream);
  uint64_t next();                 // 64 uniform bits
  uint64_t below(uint64_t bound);  // uniform in [0, bound), bound > 0 (Lemire, unbiased)
  double uniform();                // uniform in [0, 1), 53 bits

 private:
  uint64_t state_;
};

// The stream number of one use of randomness: a fixed 64-bit hash of (tag, a, b), so that, e.g.,
// Rng(seed, stream_id(kTag, epoch, sample)) draws the same numbers on every run and platform.
// Tags in use (never change them; orders are part of reproducibility): "global" (epoch
// permutation), "blocks" and "window" (kWindowed), "xform" (per-sample transforms), "build"
// (build_order); the mixtures' (mix_order.h): "mixpass" (a source's pass permutation), "mixshuf"
// (an epoch's key; random batching's shuffle), "mixseg" (the key of an epoch's later segment),
// "mixstrat" (stratified: rows of extras to batches), "mixbat" (stratified: within a batch);
// the Loader over a Mixture's: "mixdraw" (a sample's transform key: view index, pass) and
// "mixfp" (Mixture::fingerprint's digest).
uint64_t stream_id(uint64_t tag, uint64_t a, uint64_t b = 0);

}  // namespace dscache
