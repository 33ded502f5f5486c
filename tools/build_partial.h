// The build's working directory: where a build of OUTPUT works (`.OUTPUT.partial`), the
// fingerprint that lets only the same build resume there, and the final atomic publish.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "dscache/ingest/source_list.h"
#include "dscache/manifest.h"

namespace dscache {

// The fingerprint file inside the partial directory; removed just before the manifest is written.
inline constexpr const char* kFingerprintFile = ".build.json";

// partial_dir_for (the directory itself) is declared in build_pipeline.h.

// lstat succeeds (a dangling symlink exists too).
bool path_exists(const std::string& path);

// Refuses (OutputExistsError) an existing `output` without `force`, a directory that is not a
// cache even with `force`, and an interrupted build without `resume` or `force`; removes the
// interrupted build when `force` starts over. Returns true when `output` exists and is to be
// replaced.
bool check_output(const std::string& output, const std::string& partial, bool force, bool resume);

// What makes two builds the same build: the source listing, every option that changes bytes and
// the part (`part_count` 0 = the whole listing).
nlohmann::json build_fingerprint(const SourceListing& src, const BuildRecipe& recipe,
                                 Storage storage, Codec codec, uint32_t part_index = 0,
                                 uint32_t part_count = 0);

// Creates `partial` holding `fingerprint`, or, when it exists, checks that its fingerprint is
// this one (Error naming the directory otherwise).
void open_partial(const std::string& partial, const nlohmann::json& fingerprint);

// Moves the finished partial directory to `output`, swapping out an old cache atomically when
// `replace`, and syncs the parent directory.
void publish(const std::string& partial, const std::string& output, bool replace);

}  // namespace dscache
