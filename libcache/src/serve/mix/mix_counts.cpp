// A mixture's per-epoch counts: shares quantized to integers, then split exactly (mix_order.h).
//
// Everything after quantize_share is integer arithmetic, so the counts, and the orders built on
// them, are the same on every platform and compiler.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "dscache/mix_order.h"

namespace dscache {

namespace {

// 64x64 -> 128-bit products (GCC/Clang extension, as in sampler.cpp).
__extension__ typedef unsigned __int128 u128;

constexpr double kShareMax = 1048576.0;       // 2^20
constexpr double kShareScale = 4294967296.0;  // 2^32

Error invalid(const std::string& reason) { return Error(ErrorKind::kInvalidArgument, "", reason); }

}  // namespace

uint64_t quantize_share(double value, const std::string& what) {
  // !(v >= 0) also catches NaN.
  if (!std::isfinite(value) || !(value >= 0.0) || value > kShareMax) {
    throw invalid(what + " must be finite, >= 0 and <= 2^20 (got " + std::to_string(value) + ")");
  }
  return static_cast<uint64_t>(std::llround(value * kShareScale));  // exact: value x 2^32 <= 2^52
}

std::vector<uint64_t> largest_remainder(uint64_t total, const std::vector<uint64_t>& quotas) {
  u128 sum = 0;
  for (uint64_t q : quotas) sum += q;
  if (sum == 0) throw invalid("largest_remainder: the quotas are all 0");
  const size_t k = quotas.size();
  std::vector<uint64_t> parts(k);
  std::vector<u128> rems(k);  // remainders < sum, compared over the one denominator `sum`
  u128 assigned = 0;
  for (size_t i = 0; i < k; ++i) {
    const u128 exact = static_cast<u128>(total) * quotas[i];  // < 2^128: both factors < 2^64
    parts[i] = static_cast<uint64_t>(exact / sum);
    rems[i] = exact % sum;
    assigned += parts[i];
  }
  // The floors fall short by the sum of the fractions: fewer than k units, one each to the
  // largest remainders, ties to the lower index (a stable order by remainder, descending).
  const uint64_t leftover = static_cast<uint64_t>(total - assigned);
  std::vector<size_t> order(k);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return rems[a] > rems[b]; });
  for (uint64_t i = 0; i < leftover; ++i) ++parts[order[i]];
  return parts;
}

std::vector<uint64_t> mix_counts(const std::vector<uint64_t>& sizes,
                                 const std::vector<uint64_t>& shares_q, bool repeats,
                                 uint64_t epoch_samples) {
  if (sizes.size() != shares_q.size()) {
    throw invalid("mixture: " + std::to_string(shares_q.size()) + " shares for " +
                  std::to_string(sizes.size()) + " sources");
  }
  const char* kind = repeats ? "repeats" : "weights";
  if (std::all_of(shares_q.begin(), shares_q.end(), [](uint64_t q) { return q == 0; })) {
    throw invalid(std::string("mixture: the ") + kind + " are all 0: no source gives samples");
  }
  std::vector<uint64_t> counts;
  if (repeats) {
    u128 epoch = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      // round(size x repeat), half up, on the quantized repeat: (n x u + 2^31) >> 32.
      const u128 c = (static_cast<u128>(sizes[k]) * shares_q[k] + (u128{1} << 31)) >> 32;
      epoch += c;
      if (epoch > UINT64_MAX) throw invalid("mixture: the repeats give more than 2^64-1 samples");
      counts.push_back(static_cast<uint64_t>(c));
    }
    if (epoch_samples != 0 && epoch_samples != epoch) {
      throw invalid("mixture: epoch_samples " + std::to_string(epoch_samples) +
                    " differs from the " + std::to_string(static_cast<uint64_t>(epoch)) +
                    " samples the repeats give (leave it 0 with repeats)");
    }
  } else {
    u128 total = epoch_samples;
    if (total == 0) {
      for (uint64_t n : sizes) total += n;
      if (total > UINT64_MAX) throw invalid("mixture: the sources hold more than 2^64-1 samples");
    }
    counts = largest_remainder(static_cast<uint64_t>(total), shares_q);
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] == 0 && counts[k] > 0) {
      throw invalid("mixture: source " + std::to_string(k) + " holds no samples but its " +
                    (repeats ? "repeat" : "weight") + " gives it " + std::to_string(counts[k]) +
                    " per epoch");
    }
  }
  return counts;
}

}  // namespace dscache
