// The one way source images become samples: a cache recipe's decode, used by `dscache build`,
// `verify --source`, bench's decode row and the trainer's lazy cache, so that what one of them
// stores the others recompute with the same code.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dscache/ingest/idx.h"
#include "dscache/ingest/image_decode.h"
#include "dscache/ingest/source_list.h"
#include "dscache/manifest.h"

namespace dscache {

// Reads a whole file into `buf` (reused across calls). Returns false with a reason on failure.
// A URL (s3://, http(s)://; a mask a table on object storage names) is read with one GET: a
// missing object is false with a reason; any other failure (refused, the server gone after the
// retries) throws Error(kRemote), since skipping everything an unreachable server holds would
// build an empty cache.
bool read_whole_file(const std::string& path, std::vector<uint8_t>& buf, std::string& reason);

// Decodes source images with one recipe: reads a file, checks it is the file the listing saw
// (when given the listing's entry), decodes and resizes it. A plain value (copyable); const
// methods are thread-safe (each thread reads into its own buffer, kept for the thread's life).
// Never throws for a bad file: it is false with a reason.
class RecipeDecoder {
 public:
  // Fixed layout: recipe.height x recipe.width, reconciled by recipe.resize; ragged: the
  // shorter side scaled down to at most recipe.max_side, aspect kept. Channels, reduced_decode,
  // max_pixels (0 = no limit), alpha and background come from the recipe too.
  RecipeDecoder(const BuildRecipe& recipe, Layout layout);

  Layout layout() const { return layout_; }
  // Decode the pixels as stored, ignoring EXIF orientation (DecodeOptions::ignore_orientation):
  // what a build with masks or boxes does, whose annotations are on the stored pixel grid.
  void set_ignore_orientation(bool ignore) { opt_.ignore_orientation = ignore; }
  // Bytes of one fixed-layout sample; 0 for ragged (its size follows the image).
  size_t fixed_bytes() const;

  // Reads and decodes the file at `path` into *out, resized to the sample (*h x *w, the
  // recipe's size for the fixed layout). With `listed` (the listing's entry for this file) a
  // file deleted, truncated or rewritten since it was listed is refused, never decoded: its
  // bytes are not the ones the listing (and the source digest keyed on it) saw. The reason
  // ("cannot open: ...", "changed while the build ran (listed N bytes, read M, now K)", "corrupt
  // or truncated jpeg: ...") does not repeat the path; callers name the file.
  // With `geometry`: where the source's pixels landed in the sample (image_decode.h), for
  // moving its masks and boxes the same way. With `transparent`: whether the source had a
  // transparent pixel (DecodeResult::transparent).
  bool decode_file(const std::string& path, const SourceEntry* listed, std::vector<uint8_t>* out,
                   uint32_t* h, uint32_t* w, std::string* reason,
                   SampleGeometry* geometry = nullptr, bool* transparent = nullptr) const;
  // Fixed layout only: the same, writing fixed_bytes() bytes to `out` (caller-owned; may be
  // partly written when false).
  bool decode_file(const std::string& path, const SourceEntry* listed, uint8_t* out,
                   std::string* reason) const;

  // Pixels already decoded (an idx record: src_h x src_w x src_channels, HWC) made into the
  // sample: *out resized to it, *h x *w its size.
  void decode_pixels(const uint8_t* src, uint32_t src_h, uint32_t src_w, uint32_t src_channels,
                     std::vector<uint8_t>* out, uint32_t* h, uint32_t* w) const;

 private:
  Layout layout_;
  uint32_t max_side_;  // ragged only
  DecodeOptions opt_;  // height and width unused (1) for ragged
};

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
  // the image). Returns false with a reason naming the file on failure. The file is not checked
  // against the build's listing (sources.jsonl records names only): a source changed since the
  // build decodes to other pixels, which is what verify --source reports.
  bool decode(uint64_t i, std::vector<uint8_t>* out, std::string* reason) const;

 private:
  const Manifest& m_;
  std::vector<std::string> names_;
  std::string root_;
  RecipeDecoder decoder_;
  std::shared_ptr<const IdxImages> idx_;
};

}  // namespace dscache
