// The cache writer's working directory (internal): where a write of OUTPUT works
// (`.OUTPUT.partial`), the fingerprint that lets only the same write resume there, the recovery
// of an interrupted publish and the atomic publish itself. See dscache/cache_writer.h.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "dscache/manifest.h"

namespace dscache {

// The fingerprint file inside the partial directory. It stays there until the directory is
// published and is removed from the published cache last, so it also tells an unfinished build
// (partial dir with it) from the old cache a --force swap moved out (partial dir without it).
inline constexpr const char* kFingerprintFile = ".build.json";

// lstat succeeds (a dangling symlink exists too).
bool path_exists(const std::string& path);

// Removes a cache or partial directory, manifest.json first (so a crash part-way leaves a
// directory that no reader takes for a cache).
void remove_tree(const std::string& dir);

// Finishes what a build or merge killed after its last durable step left behind; call with the
// output's lock held, before anything else. A partial directory without a fingerprint holds no
// resumable work (the old cache a --force swap moved out, or a directory killed before its
// fingerprint was written): it is removed. A fingerprint left in a published `output` (killed
// just after the publish) is removed.
void recover_interrupted(const std::string& output, const std::string& partial);

// What check_output decided about an existing `output`.
struct OutputPlan {
  bool replace = false;     // `output` exists and the new cache is to be swapped in
  bool maybe_done = false;  // --resume, no interrupted build: `output` may already be this
                            // build (the caller compares; if not, it must refuse as below)
};

// Refuses (OutputExistsError) an existing `output` without `force` (unless `resume` finds no
// interrupted build: then plan.maybe_done), a directory that is not a cache even with `force`,
// and an interrupted build without `resume` or `force`; removes the interrupted build when
// `force` starts over.
OutputPlan check_output(const std::string& output, const std::string& partial, bool force,
                        bool resume);

// The refusal check_output makes for an existing `output` without --force.
[[noreturn]] void throw_output_exists(const std::string& output);

// Creates `partial` holding `fingerprint`, or, when it exists, checks that its fingerprint is
// this one (Error naming the directory otherwise).
void open_partial(const std::string& partial, const nlohmann::json& fingerprint);

// Moves the finished partial directory (manifest written, fingerprint still inside) to
// `output`: a rename, or when `replace` one renameat2(RENAME_EXCHANGE) that switches the path
// from the old cache to the new one in one step (a reader that opened the directory sees one
// generation), after which the old cache, now at `partial`, is removed. The fingerprint is
// removed from `output` last. A crash at any point leaves what recover_interrupted() and
// --resume complete.
void publish(const std::string& partial, const std::string& output, bool replace);

}  // namespace dscache
