// The build's parallel stages: read + decode + resize each source entry (any thread), handed to
// a serial consumer in source order (a oneTBB parallel_pipeline).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dscache/ingest/source_decoder.h"
#include "dscache/ingest/source_list.h"
#include "dscache/manifest.h"

namespace dscache {

// A unit of work flowing through the pipeline; reused through a pool to avoid per-sample
// allocations. Owned by the pipeline; the consumer sees it only during its call.
struct Token {
  uint64_t index = 0;           // position in the cache's order (what shards and resume count)
  uint64_t entry = 0;           // the source entry stored there (== index unless --shuffle)
  std::vector<uint8_t> pixels;  // decoded sample
  std::vector<uint8_t> stored;  // codec kJpeg: the sample as stored (its JPEG stream)
  uint32_t height = 0;          // its size (the ragged layout varies per sample)
  uint32_t width = 0;
  uint64_t checksum = 0;  // XXH64 of the sample's stored bytes (pixels, or the JPEG), when ok
  // One value per SourceListing::fields entry, as CacheWriter::append takes it: masks and boxes
  // moved with the image (geometry of its own decode), rows_of rows following their boxes.
  std::vector<std::vector<uint8_t>> fields;
  bool ok = false;
  bool transparent = false;  // the source had a transparent pixel (DecodeResult::transparent)
  std::string reason;        // why not ok, for the skip report
};

// Decodes one source entry with the build's recipe (ingest's RecipeDecoder, checking each file
// against the listing) and makes the stored form and checksum. Thread-safe; holds references to
// `src`, which must outlive it.
class SampleDecoder {
 public:
  // `recipe` is resolved (idx sizes and channels filled in); `ragged` selects the ragged
  // layout (recipe.max_side), otherwise recipe.height x recipe.width. With codec kJpeg each
  // sample is also encoded at recipe.quality.
  SampleDecoder(const SourceListing& src, const BuildRecipe& recipe, bool ragged, Codec codec);

  // Fills t's pixels, size, stored bytes (kJpeg), checksum and ok/reason for source entry
  // t->entry. Never throws for a bad file: it becomes ok = false with a reason.
  void decode(Token* t) const;

  // Bytes of one fixed-layout sample (0 for ragged: tokens grow as needed).
  size_t fixed_bytes() const;

 private:
  // t's field values for source entry t->entry, the image decoded with geometry `g`. False
  // with t->reason (a mask that cannot be read or is not its image's size).
  bool make_fields(Token* t, const SampleGeometry& g) const;
  // The source-sized mask of field f for entry e into *mask (h x w elements of the field's
  // dtype), or false with *reason.
  bool source_mask(size_t f, uint64_t e, const SampleGeometry& g, std::vector<uint8_t>* mask,
                   std::string* reason) const;

  const SourceListing& src_;
  BuildRecipe recipe_;
  Codec codec_;
  RecipeDecoder decoder_;
};

// Runs positions [start, end) of `order` (position k holds source entry order[k]) through
// `decoder` on `threads` threads and calls `consume` for each in that order, from one thread at a
// time. When `consume` returns false no more entries are
// started and no further token is passed to it.
void run_decode_pipeline(const SampleDecoder& decoder, const std::vector<uint64_t>& order,
                         uint64_t start, uint64_t end, int threads,
                         const std::function<bool(const Token&)>& consume);

}  // namespace dscache
