// The build's last step: the side files (labels, checksums, index, sources, skips) and
// the manifest, written into the partial directory from what the writer recorded.
#pragma once

#include <string>

#include "build_writer.h"
#include "dscache/ingest/source_list.h"
#include "dscache/manifest.h"

namespace dscache {

// Writes every side file into `partial`, then manifest.json (a directory without it is not a
// cache; with it and the fingerprint, a finished build waiting to be published), then removes
// the sidecars and syncs the directory. The writer's shards must all be committed. `part`
// (nullptr for a whole build) is recorded in the manifest. Returns the manifest written.
Manifest finish_cache(const std::string& partial, const SourceListing& src,
                      const BuildRecipe& recipe, Storage storage, bool ragged, Codec codec,
                      BuildWriter& writer, const PartRecord* part = nullptr);

// A partial directory whose manifest was written by finish_cache() before a crash: removes
// what is left of the build's state but the fingerprint (sidecars, temp files) and returns the
// manifest, ready to publish.
Manifest finish_partial(const std::string& partial);

// ISO 8601 UTC time now ("2024-05-01T12:00:00Z"), as manifests record it.
std::string utc_now();

}  // namespace dscache
