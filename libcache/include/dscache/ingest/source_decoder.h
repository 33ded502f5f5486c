// Re-decodes a built cache's samples from their recorded sources (verify --source, bench).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dscache/ingest/idx.h"
#include "dscache/ingest/image_decode.h"
#include "dscache/manifest.h"

namespace dscache {

// Reads a whole file into `buf` (reused across calls). Returns false with a reason on failure.
bool read_whole_file(const std::string& path, std::vector<uint8_t>& buf, std::string& reason);

// Decodes sample i of a cache from its source with the cache's recorded recipe, so the result
// can be compared with (or stand in for) the stored sample. Thread-safe after construction.
class SourceDecoder {
 public:
  // `names`: sources.jsonl's entries; `root`: the source root (the manifest's, or where the
  // dataset moved). Reads the idx images file up front for idx sources (throws Error).
  SourceDecoder(const Manifest& m, std::vector<std::string> names, std::string root);
  // For decoding samples [0, samples) only: an idx source is read only as far as their records
  // need (bench's decode row), not whole.
  SourceDecoder(const Manifest& m, std::vector<std::string> names, std::string root,
                uint64_t samples);

  size_t size() const { return names_.size(); }
  // The file sample i came from (the idx images file for idx sources).
  std::string path(uint64_t i) const;
  // Decodes into *out (resized to the sample's bytes; for the ragged layout its size follows
  // the image). Returns false with a reason naming the file on failure.
  bool decode(uint64_t i, std::vector<uint8_t>* out, std::string* reason) const;

 private:
  const Manifest& m_;
  std::vector<std::string> names_;
  std::string root_;
  DecodeOptions opt_;
  std::shared_ptr<const IdxImages> idx_;
};

}  // namespace dscache
