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
// writer's shards must all be committed. Returns the manifest written.
Manifest finish_cache(const std::string& partial, const SourceListing& src,
                      const BuildRecipe& recipe, Storage storage, bool ragged, Codec codec,
                      BuildWriter& writer);

}  // namespace dscache
