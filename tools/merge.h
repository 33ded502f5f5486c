// `dscache merge` as a library call: checks that the parts of a partitioned build
// (`dscache build --part I/N`) belong together and joins them into the cache a single build
// would make: shards hard-linked (copied across filesystems) and renumbered, side files
// concatenated, manifest last; atomic and resumable like a build.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "dscache/exit_codes.h"

namespace dscache {

struct MergeOptions {
  std::vector<std::string> parts;  // part cache directories, in any order (see expect_parts)
  std::string output;              // cache directory to create
  bool force = false;              // replace an existing cache at `output` / discard a partial
  bool resume = false;             // continue an interrupted merge of `output`
  bool strict = false;             // refuse parts that recorded skipped entries
  std::string command = "dscache merge";  // written into the lock file to name the holder
  // --parts N: `parts` are parts 0..N-1, in that order; before anything else, every one must have
  // finished (see run_merge). 0 (default): any order, N taken from the parts' manifests.
  uint32_t expect_parts = 0;
};

struct MergeSummary {
  uint64_t count = 0;    // samples in the merged cache
  uint64_t skipped = 0;  // source entries the parts skipped
  uint64_t parts = 0;    // parts joined
  uint64_t shards = 0;   // shards in the merged cache
  uint64_t linked = 0;   // shards hard-linked in this run
  uint64_t copied = 0;   // shards copied in this run (another filesystem)
  std::string output;    // absolute path of the cache
};

// The parts do not make one cache: a part missing or given twice, a part from another listing,
// built with other options, or not a part at all. The message names the part directory.
class PartsMismatchError : public Error, public ExitsWith<ExitCode::kUsage> {
 public:
  using Error::Error;
};

// With expect_parts, first (before the lock, so a refusal writes nothing): PartsMismatchError
// when `parts` are not expect_parts directories, and Error(kNotFound) naming every part that did
// not finish, each as missing (no manifest.json) or unfinished (a partial build beside it, for
// `dscache build --resume`); a part that is not the part its place says is a PartsMismatchError
// once the parts are read. Then runs the merge holding the lock on `output` (as build:
// LockedError when another process holds it). A --resume of a merge already complete at
// `output` returns its summary. Throws PartsMismatchError, BadSourceError (--strict and a part
// skipped entries), OutputExistsError (as build), or Error (a part's files are corrupt or
// unreadable: kCorruption / kNotFound / kIOError; an interrupted merge is then left for
// --resume).
MergeSummary run_merge(const MergeOptions& options);

}  // namespace dscache
