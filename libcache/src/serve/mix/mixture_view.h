// Private: Mixture::view(), the concatenation of a mixture's sources as one SampleSource.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "dscache/mixture.h"
#include "dscache/sample_source.h"

namespace dscache {
namespace detail {

// Where each source starts in the concatenation: offsets[k] is source k's first index,
// offsets[K] the total. Empty sources share their neighbour's offset.
std::vector<uint64_t> mix_offsets(const std::vector<MixSource>& sources);
// (source, local index) of index i < offsets.back(): the last source starting at or before i.
std::pair<uint32_t, uint64_t> mix_locate(const std::vector<uint64_t>& offsets, uint64_t i);

// The view over `sources` (checked by Mixture::make: same channels, fields, encoding):
// labels through remaps[k] (empty: passed through), everything else forwarded to the sample's
// source. Shares the sources; thread-safe as they are.
std::shared_ptr<const SampleSource> make_mix_view(std::vector<MixSource> sources,
                                                  std::vector<std::vector<int64_t>> remaps);

}  // namespace detail
}  // namespace dscache
