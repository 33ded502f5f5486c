// MNIST-style idx files (idx3 images, idx1 labels), plain or gzip-compressed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dscache {

// An idx3 image file held in memory: `count` grey images of rows x cols, row-major.
struct IdxImages {
  uint32_t count = 0;           // images in the file
  uint32_t rows = 0;            // image height
  uint32_t cols = 0;            // image width
  std::vector<uint8_t> pixels;  // count * rows * cols bytes
  const uint8_t* image(uint64_t i) const { return pixels.data() + i * rows * cols; }
};

// True when the file starts with the idx3 ubyte magic (0x00000803), after gunzip if gzipped.
bool is_idx_images_file(const std::string& path);

// Reads a whole idx3 images file; throws Error(kCorruption) naming the file on a bad magic,
// a truncated body or trailing bytes. A gzip'ed file is inflated only as far as its header
// declares (and one byte more, to see trailing bytes): a small bomb costs what it claims, not
// what it inflates to. A path that is not a regular file is Corruption (never blocks).
IdxImages read_idx_images(const std::string& path);
// Only the first min(max_images, header count) images (count says how many were read): the
// bytes after them are neither inflated nor checked. For callers that need a few samples.
IdxImages read_idx_images(const std::string& path, uint64_t max_images);

// Reads a whole idx1 labels file (magic 0x00000801).
std::vector<uint8_t> read_idx_labels(const std::string& path);

// The conventional labels file beside an images file ("train-images-idx3-ubyte.gz" ->
// "train-labels-idx1-ubyte.gz", with or without .gz); empty when none exists.
std::string idx_labels_sibling(const std::string& images_path);

}  // namespace dscache
