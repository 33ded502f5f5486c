// What makes two builds the same build, so that only the same build resumes an interrupted one
// (the cache writer's fingerprint, dscache/cache_writer.h) or counts as already complete.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "dscache/ingest/source_list.h"
#include "dscache/manifest.h"

namespace dscache {

// The source listing, every option that changes bytes and the part (`part_count` 0 = the whole
// listing).
nlohmann::json build_fingerprint(const SourceListing& src, const BuildRecipe& recipe,
                                 Storage storage, Codec codec, uint32_t part_index = 0,
                                 uint32_t part_count = 0);

// The fingerprint of the build that wrote manifest `m` (what build_fingerprint gave it).
nlohmann::json build_fingerprint(const Manifest& m);

}  // namespace dscache
