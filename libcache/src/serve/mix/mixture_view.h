// Private: Mixture::view(), the concatenation of a mixture's sources as one SampleSource.
#pragma once

#include <cstddef>
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

// The one place a source's label becomes the mixture's: remap[label] (an empty remap passes it
// through). Error(kCorruption) naming the source and its sample `local` when the label names none
// of the source's classes. The view and the Loader's fill (entries read directly) both call it.
[[noreturn]] void mix_label_outside(const MixSource& source, uint64_t local, int64_t label,
                                    size_t classes);
inline int64_t mix_unify_label(const MixSource& source, const std::vector<int64_t>& remap,
                               uint64_t local, int64_t label) {
  if (remap.empty()) return label;
  if (label < 0 || static_cast<uint64_t>(label) >= remap.size()) {
    mix_label_outside(source, local, label, remap.size());
  }
  return remap[static_cast<size_t>(label)];
}

// The view over `sources` (checked by Mixture::make: same channels, fields, encoding):
// labels through remaps[k] (empty: passed through), everything else forwarded to the sample's
// source. Shares the sources; thread-safe as they are.
std::shared_ptr<const SampleSource> make_mix_view(std::vector<MixSource> sources,
                                                  std::vector<std::vector<int64_t>> remaps);

}  // namespace detail
}  // namespace dscache
