// The build's last step: the side files (labels, checksums, index, sources, skips) and
// the manifest, written into the partial directory from what the writer recorded.
#pragma once

#include <string>

#include "build_writer.h"
#include "dscache/ingest/source_list.h"
#include "dscache/manifest.h"

namespace dscache {

// Writes every side file into `partial`, removes the sidecars and the fingerprint, then writes
// manifest.json last (a directory without it is not a cache) and syncs the directory. The
// writer's shards must all be committed. `part` (nullptr for a whole build) is recorded in the
// manifest. Returns the manifest written.
Manifest finish_cache(const std::string& partial, const SourceListing& src,
                      const BuildRecipe& recipe, Storage storage, bool ragged, Codec codec,
                      BuildWriter& writer, const PartRecord* part = nullptr);

// ISO 8601 UTC time now ("2024-05-01T12:00:00Z"), as manifests record it.
std::string utc_now();

}  // namespace dscache
