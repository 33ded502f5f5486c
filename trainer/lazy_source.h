// --lazy-cache: train straight from an image folder or list, decoding each image on first use
// into a persistent LazyCache file (no torch types; built only with the ingest library).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dscache/sample_source.h"

namespace dscache {
namespace train {

struct LazySourceOptions {
  std::string source;      // class-per-folder tree or CSV/TSV list (as `dscache build` reads)
  std::string cache_file;  // LazyCache file; created when missing, reused afterwards
  uint32_t size = 0;       // decoded samples are size x size (center crop); > 0
  uint32_t channels = 3;   // 3 (RGB) or 1 (grey)
};

// What identifies a training set's samples (their bytes, order and labels), recorded in
// checkpoints. `recipe` is readable (how the samples were made, from what); `content` is a digest
// of the bytes themselves: a built cache's per-shard, label and checksum-file XXH64s (so any
// rebuild from other images, in another order, codec or quality differs), a lazy source's
// listing digest (every file's path, size and mtime) with the decode recipe.
struct DataIdentity {
  std::string recipe;
  std::string content;  // 16 hex digits
};

struct LazySource {
  std::shared_ptr<const SampleSource> source;  // a LazyCache
  std::vector<std::string> classes;            // label i names classes[i]
  DataIdentity identity;
};

// True when this build can decode images (OpenCV) for --lazy-cache.
bool lazy_source_supported();

// Lists the source, then opens (or creates) the LazyCache whose decode function reads and
// decodes one file. The cache file is keyed by the listing's digest and the decode recipe, so a
// changed folder or size is refused rather than mixed. Throws dscache::Error.
LazySource open_lazy_source(const LazySourceOptions& options);

}  // namespace train
}  // namespace dscache
