// What a build of a listed source will put on disk: `dscache build --dry-run` prints it, and a
// real build compares it with the free space before it starts (docs/BUILD.md "Dry run").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "build_pipeline.h"
#include "dscache/ingest/source_list.h"
#include "dscache/manifest.h"

namespace dscache {

// The expected size of the cache directory a build writes. Plain value type.
struct BuildEstimate {
  uint64_t entries = 0;         // source positions this build covers (its part, or all)
  uint64_t samples = 0;         // of which expected to become samples
  uint64_t skips = 0;           // of which the listing (or an image header) already says are bad
  uint64_t shards = 0;          // shard files
  uint64_t image_bytes = 0;     // the samples' stored bytes (shard data)
  uint64_t field_bytes = 0;     // field values and offsets (docs/FORMAT.md "Fields")
  uint64_t bytes = 0;           // everything: shards, field files, side files, manifest.json
  std::vector<uint64_t> files;  // each file's bytes (they sum to `bytes`)
  // The resume state the build holds beside its files until the manifest is written (one
  // sidecar per shard and the fingerprint; docs/FORMAT.md "Building"), modelled: part of the
  // peak on disk, not of the cache.
  std::vector<uint64_t> transient;
  // How image_bytes was found: "exact (fixed size)", "from the headers of the sources",
  // "estimate from N of M sources encoded at quality Q".
  std::string basis;
  std::vector<std::string> notes;  // what the estimate cannot know, and by how much it may be off
};

// What the build of `est` occupies at its peak on a filesystem of `block`-byte blocks (0: bytes):
// its files and resume state, each rounded up to a block.
uint64_t allocated_bytes(const BuildEstimate& est, uint64_t block);

// Estimates the build of positions [first, end) of `src`'s cache order with the resolved recipe
// `r`. Fixed-size raw samples are exact; the ragged layout reads every source's image header
// (regular files only, at most 1 MiB each); the JPEG codec decodes and encodes up to
// kJpegSampleCount sources spread over the range and extrapolates their compression ratio.
// Sources that will fail to decode are counted as samples (only their decode can tell).
BuildEstimate estimate_build(const BuildOptions& opt, const SourceListing& src,
                             const BuildRecipe& r, uint64_t first, uint64_t end);

// `dscache build --dry-run`: lists the source as the build would (same errors), estimates, and
// prints the estimate, the free space where OUTPUT goes and whether the build would start.
// Writes nothing (not even the lock file).
void dry_run_build(const BuildOptions& opt);

constexpr uint64_t kJpegSampleCount = 32;  // sources encoded to estimate a JPEG cache

// HDF5 shard bytes beyond the image data and the labels dataset (superblock, object headers,
// the channel_order attribute), measured on libhdf5 1.10 (Debian 12) for every shape.
constexpr uint64_t kHdf5ShardOverhead = 6144;

}  // namespace dscache
