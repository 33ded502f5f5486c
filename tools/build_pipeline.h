// `dscache build` as a library call: list the source, decode in parallel, write shards in order.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dscache/cache_writer.h"
#include "dscache/error.h"
#include "dscache/exit_codes.h"
#include "dscache/ingest/source_list.h"
#include "dscache/manifest.h"

namespace dscache {

struct BuildOptions {
  std::string source;                    // folder, .csv/.tsv/.jsonl list, COCO JSON or idx3
  std::string output;                    // cache directory to create
  BuildRecipe recipe;                    // size, channels, resize policy, limits, shard size
  bool size_given = false;               // false: idx sources use their native size
  bool channels_given = false;           // false: 3, or 1 for idx sources
  Storage storage = Storage::kNpy;       // shard format
  Layout layout = Layout::kFixed;        // fixed H x W, or ragged (recipe.max_side)
  Codec codec = Codec::kRaw;             // raw pixels, or JPEG at recipe.quality
  int threads = 0;                       // decode threads; 0 = all cores
  bool strict = false;                   // first bad file aborts the build, nothing is kept
  bool force = false;                    // replace an existing cache at `output`
  bool resume = false;                   // continue an interrupted build of `output`
  bool quiet = false;                    // no progress lines
  bool space_check = true;               // refuse to start when the estimate exceeds free space
  bool dry_run = false;                  // estimate only (dry_run_build); nothing is written
  uint32_t part_index = 0;               // --part I/N: build part I (0-based) ...
  uint32_t part_count = 0;               // ... of N of the cache order; 0 = the whole listing
  std::string labels_file;               // idx: labels file ("" = conventional sibling)
  std::vector<std::string> class_names;  // names for integer labels
  // Tables and COCO sources (dscache/ingest/source_list.h, SourceOptions):
  std::string image_column;  // --image-column: the image's column; "" = image_path, else path
  std::string label_column;  // --label-column: the class label's; "" = label when present
  std::vector<std::pair<std::string, std::string>> field_kinds;  // --field NAME=KIND, in order
  // --field NAME=KIND:CLASS,...: the class names of mask and multi-hot columns, in order
  std::vector<std::pair<std::string, std::vector<std::string>>> field_classes;
  bool confine = false;    // --confine: listed paths must stay in the list's folder / --image-root
  std::string image_root;  // --image-root: COCO images
  std::string coco_mask;   // --coco-mask: "" or "none" (no mask field), "semantic"
  std::string command = "dscache build";  // written into the lock file to name the holder
};

struct BuildSummary {
  uint64_t count = 0;                  // samples in the cache
  uint64_t skipped = 0;                // source entries skipped
  uint64_t resumed = 0;                // samples taken over from an interrupted build
  bool transparent_known = false;      // the manifest has the count (Manifest::transparent)
  uint64_t transparent = 0;            // samples whose source had a transparent pixel
  AlphaMode alpha = AlphaMode::kDrop;  // what the build did with their alpha
  double seconds = 0;                  // wall time of this run
  std::string output;                  // absolute path of the cache
};

// --strict met a file it cannot decode. Nothing was kept.
class BadSourceError : public Error, public ExitsWith<ExitCode::kBadSource> {
 public:
  using Error::Error;
};

// A build refused before it started: its estimate (build_estimate.h) exceeds the free space of
// OUTPUT's filesystem. Nothing was written (a resumed build's kept work stays).
class NotEnoughSpaceError : public Error, public ExitsWith<ExitCode::kNoSpace> {
 public:
  using Error::Error;
};

// What a build of `opt` covers: its source listed, the recipe resolved against it, and the
// positions [first, end) of the cache order it builds (its part, or all). The listing's errors
// and the recipe's UsageErrors are the build's own.
struct BuildPlan {
  SourceListing src;
  BuildRecipe recipe;
  uint64_t first = 0;
  uint64_t end = 0;
};
BuildPlan plan_build(const BuildOptions& opt);

// Runs the whole build through a CacheWriter (dscache/cache_writer.h: the lock on `output`, the
// partial directory, resume, publish; LockedError when another process holds the lock). Throws
// BadSourceError, OutputExistsError (cache_writer.h), NotEnoughSpaceError (unless
// !options.space_check: the estimate, less what a resumed build kept, exceeds the free space), or
// Error for anything else (in which case an
// interrupted build is left in `.<name>.partial` for --resume). A --resume of a build that is
// already complete at `output` (killed after its publish) returns its summary.
BuildSummary run_build(const BuildOptions& options);

}  // namespace dscache
