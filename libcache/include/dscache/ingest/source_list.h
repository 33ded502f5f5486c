// Lists what `dscache build` reads: a class-per-folder tree, a CSV/TSV list, or an idx file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dscache/ingest/idx.h"

namespace dscache {

// One sample-to-be. Plain value type.
struct SourceEntry {
  std::string path;      // absolute path to read (folder and list sources); empty for idx
  std::string name;      // what sources.jsonl records: relative path, or "<idx file>#<i>"
  int64_t label = 0;     // class index
  uint64_t size = 0;     // file size at listing time (0 when missing)
  int64_t mtime_ns = 0;  // modification time at listing time (0 when missing)
};

struct SourceOptions {
  std::string labels_file;               // idx: explicit labels file ("" = conventional sibling)
  std::vector<std::string> class_names;  // names for integer labels (idx, list); empty = "0".."n"
};

// Everything the build needs to know about its input. Owns the idx pixels for idx sources.
struct SourceListing {
  std::string kind;                      // "folder", "list" or "idx"
  std::string root;                      // absolute folder, list file or idx images file
  std::string labels_path;               // idx only
  std::vector<std::string> classes;      // class names, label i names classes[i]
  std::vector<SourceEntry> entries;      // in build order
  std::shared_ptr<const IdxImages> idx;  // idx only
  uint64_t digest = 0;                   // XXH64 over entries' name, size and mtime
};

// Lists `source`. Throws Error: NotFound (missing source), InvalidArgument (bad list line,
// label out of range of --classes, an integer label >= 2^20 without --classes, a folder with no
// class folders), Corruption (bad idx file).
SourceListing list_source(const std::string& source, const SourceOptions& options);

// Resolves the file a recorded source name refers to (for verify --source).
std::string source_entry_path(const std::string& kind, const std::string& root,
                              const std::string& name);

// Absolute, lexically normalised form of a path (no symlink resolution).
std::string absolute_path(const std::string& path);

}  // namespace dscache
