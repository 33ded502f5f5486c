// Shuffling and rank sharding: the epoch order, and the generator every random choice uses.
//
// Reproducibility contract: the orders produced here are part of a run's identity (a resumed or
// re-run job must see the same samples in the same order), so the generator, the stream
// derivation and the shuffles below must never change. tests/test_sampler.cpp holds golden
// orders that fail if they do.
#include "dscache/sampler.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "dscache/error.h"
#include "serve/shuffle.h"

namespace dscache {

namespace {

// Stream tags (ASCII, big-endian packed). Never renumber: they fix every shuffle ever made.
// 64x64 -> 128-bit products for Lemire's method (GCC/Clang extension).
__extension__ typedef unsigned __int128 u128;

constexpr uint64_t kTagGlobal = 0x676c6f62616cull;  // "global": kGlobal permutation
constexpr uint64_t kTagBlocks = 0x626c6f636b73ull;  // "blocks": kWindowed block order
constexpr uint64_t kTagWindow = 0x77696e646f77ull;  // "window": kWindowed per-window shuffle
constexpr uint64_t kTagBuild = 0x6275696c64ull;     // "build": build_order

Error invalid(const std::string& reason) { return Error(ErrorKind::kInvalidArgument, "", reason); }

// kWindowed's block size in force: block 0 or > n means one block of n.
uint64_t effective_block(uint64_t n, const SamplerOptions& options) {
  return options.block == 0 || options.block > n ? n : options.block;
}

// kWindowed's shuffled block order (see the comment in epoch_order).
std::vector<uint64_t> shuffled_blocks(uint64_t n, const SamplerOptions& options, uint64_t seed,
                                      uint64_t epoch) {
  const uint64_t block = effective_block(n, options);
  const uint64_t blocks = (n + block - 1) / block;
  std::vector<uint64_t> block_order(blocks);
  std::iota(block_order.begin(), block_order.end(), uint64_t{0});
  Rng block_rng(seed, stream_id(kTagBlocks, epoch));
  shuffle(block_order.data(), blocks, block_rng);
  return block_order;
}

// kWindowed: see the comment in epoch_order.
std::vector<uint64_t> windowed_order(uint64_t n, const SamplerOptions& options, uint64_t seed,
                                     uint64_t epoch) {
  std::vector<uint64_t> order;
  if (n == 0) return order;
  order.reserve(n);
  const uint64_t block = effective_block(n, options);
  const std::vector<uint64_t> block_order = shuffled_blocks(n, options, seed, epoch);
  const uint64_t blocks = block_order.size();

  const uint64_t per_window = options.window_blocks;
  for (uint64_t w = 0, b = 0; b < blocks; ++w, b += per_window) {
    const size_t window_start = order.size();
    for (uint64_t k = b; k < blocks && k < b + per_window; ++k) {
      const uint64_t first = block_order[k] * block;
      const uint64_t last = std::min(first + block, n);
      for (uint64_t i = first; i < last; ++i) order.push_back(i);
    }
    Rng window_rng(seed, stream_id(kTagWindow, epoch, w));
    shuffle(order.data() + window_start, order.size() - window_start, window_rng);
  }
  return order;
}

uint64_t mix64(uint64_t z) {
  // SplitMix64's finalizer (Stafford's Mix13): a bijection with full avalanche.
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ull;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebull;
  z ^= z >> 31;
  return z;
}

}  // namespace

// Fisher–Yates from the back: position i takes a uniform element of [0, i] (serve/shuffle.h).
void shuffle(uint64_t* first, uint64_t count, Rng& rng) {
  for (uint64_t i = count; i > 1; --i) {
    const uint64_t j = rng.below(i);
    std::swap(first[i - 1], first[j]);
  }
}

uint64_t stream_id(uint64_t tag, uint64_t a, uint64_t b) {
  // Each step is h' = mix64(h ^ mix64(v + golden)); mix64 is a bijection, so distinct values
  // give distinct inputs at every step.
  constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;
  uint64_t h = mix64(tag);
  h = mix64(h ^ mix64(a + kGolden));
  h = mix64(h ^ mix64(b + kGolden));
  return h;
}

// state = mix64(seed ^ mix64(stream ^ 0xd1b54a32d192ed03)); then SplitMix64: add the golden
// gamma, return mix64(state). Two different streams of one seed start far apart in the sequence.
Rng::Rng(uint64_t seed, uint64_t stream)
    : state_(mix64(seed ^ mix64(stream ^ 0xd1b54a32d192ed03ull))) {}

uint64_t Rng::next() {
  state_ += 0x9e3779b97f4a7c15ull;
  return mix64(state_);
}

uint64_t Rng::below(uint64_t bound) {
  if (bound == 0) throw invalid("Rng::below: bound must be > 0");
  // Lemire, "Fast Random Integer Generation in an Interval" (2019): multiply-shift, rejecting
  // the few low products that would bias the result.
  u128 m = static_cast<u128>(next()) * bound;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < bound) {
    const uint64_t threshold = (0 - bound) % bound;
    while (low < threshold) {
      m = static_cast<u128>(next()) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

uint64_t default_window_bytes(uint64_t available_bytes) {
  constexpr uint64_t kMin = uint64_t{64} << 20, kMax = uint64_t{4} << 30;
  return std::clamp(available_bytes / 4, kMin, kMax);
}

SamplerOptions resolve_window(const SamplerOptions& options, uint64_t n,
                              uint64_t stored_sample_bytes, uint64_t available_bytes) {
  SamplerOptions r = options;
  if (options.shuffle != Shuffle::kWindowed || options.block != 0 || n == 0) return r;
  const uint64_t per = std::max<uint64_t>(1, stored_sample_bytes);
  const uint64_t block_bytes = options.block_bytes != 0 ? options.block_bytes : kDefaultBlockBytes;
  const uint64_t window_bytes =
      options.window_bytes != 0 ? options.window_bytes : default_window_bytes(available_bytes);
  r.block = std::clamp<uint64_t>(block_bytes / per, 1, n);
  const uint64_t blocks = (n + r.block - 1) / r.block;  // a larger window changes nothing
  r.window_blocks = std::clamp<uint64_t>(window_bytes / (r.block * per), 1, blocks);
  r.block_bytes = r.block * per;
  r.window_bytes = r.window_blocks * r.block_bytes;
  return r;
}

void validate(const SamplerOptions& options, uint64_t /*n*/) {
  switch (options.shuffle) {
    case Shuffle::kNone:
    case Shuffle::kGlobal:
    case Shuffle::kWindowed:
      break;
    default:
      throw invalid("sampler.shuffle has an unknown value");
  }
  if (options.world_size == 0) throw invalid("sampler.world_size must be >= 1");
  if (options.rank >= options.world_size) {
    throw invalid("sampler.rank " + std::to_string(options.rank) + " >= sampler.world_size " +
                  std::to_string(options.world_size));
  }
  if (options.shuffle == Shuffle::kWindowed && options.window_blocks == 0) {
    throw invalid("sampler.window_blocks must be >= 1");
  }
  if (options.tail != RankTail::kPad && options.tail != RankTail::kDrop) {
    throw invalid("sampler.tail has an unknown value");
  }
}

uint64_t samples_per_rank(uint64_t n, const SamplerOptions& options) {
  const uint64_t world = options.world_size == 0 ? 1 : options.world_size;
  if (options.tail == RankTail::kDrop) return n / world;
  return n / world + (n % world != 0 ? 1 : 0);
}

// The epoch's global order, then the rank tail, then this rank's stride:
//  - kNone: 0, 1, ..., n-1.
//  - kGlobal: Fisher–Yates over 0..n-1 with Rng(seed, stream_id("global", epoch, 0)).
//  - kWindowed: 0..n-1 cut into blocks of `block` samples (the last may be short; block 0 or
//    > n means one block). The block order is shuffled with Rng(seed, stream_id("blocks",
//    epoch, 0)). Window w is blocks [w*window_blocks, (w+1)*window_blocks) of that shuffled
//    order — window_blocks*block samples, fewer for the window holding the short block or for
//    the last window — and its samples (concatenated in block order) are shuffled with
//    Rng(seed, stream_id("window", epoch, w)). Reads stay inside window_blocks blocks at a time.
//    Only block and window_blocks count here: block_bytes/window_bytes are turned into them
//    beforehand (resolve_window), so one (block, window_blocks) pair is one order everywhere.
//  - Tail: kPad appends order[0], order[1], ... (cyclically when n < world) until the length is
//    ceil(n/world)*world; kDrop truncates to floor(n/world)*world.
//  - Rank r takes positions r, r + world, r + 2*world, ...
std::vector<uint64_t> epoch_order(uint64_t n, const SamplerOptions& options, uint64_t seed,
                                  uint64_t epoch) {
  validate(options, n);
  std::vector<uint64_t> order;
  switch (options.shuffle) {
    case Shuffle::kNone:
      order.resize(n);
      std::iota(order.begin(), order.end(), uint64_t{0});
      break;
    case Shuffle::kGlobal: {
      order.resize(n);
      std::iota(order.begin(), order.end(), uint64_t{0});
      Rng rng(seed, stream_id(kTagGlobal, epoch));
      shuffle(order.data(), n, rng);
      break;
    }
    case Shuffle::kWindowed:
      order = windowed_order(n, options, seed, epoch);
      break;
  }

  const uint64_t per_rank = samples_per_rank(n, options);
  std::vector<uint64_t> mine;
  mine.reserve(per_rank);
  for (uint64_t k = 0; k < per_rank; ++k) {
    mine.push_back(order[padded_position(n, rank_position(options, k))]);
  }
  return mine;
}

uint64_t rank_position(const SamplerOptions& options, uint64_t k) {
  return options.rank + k * options.world_size;
}

uint64_t padded_position(uint64_t n, uint64_t p) { return p < n ? p : (p - n) % n; }

uint64_t rank_positions_below(const SamplerOptions& options, uint64_t g) {
  const uint64_t rank = options.rank, world = options.world_size;
  return g <= rank ? 0 : (g - rank + world - 1) / world;
}

std::vector<uint64_t> epoch_blocks(uint64_t n, const SamplerOptions& options, uint64_t seed,
                                   uint64_t epoch) {
  validate(options, n);
  if (options.shuffle != Shuffle::kWindowed || n == 0) return {};
  return shuffled_blocks(n, options, seed, epoch);
}

std::vector<uint64_t> build_order(uint64_t n, uint64_t seed) {
  std::vector<uint64_t> order(n);
  std::iota(order.begin(), order.end(), uint64_t{0});
  Rng rng(seed, stream_id(kTagBuild, n));
  shuffle(order.data(), n, rng);
  return order;
}

}  // namespace dscache
