// Fuzz target: the idx parsers (read_idx_images, read_idx_labels, is_idx_images_file) on an
// arbitrary file, plain or gzip-compressed (zlib reads either).
// Seeds: small idx3 images and idx1 labels files, plain and gzipped.
#include <cstddef>
#include <cstdint>

#include "dscache/ingest/idx.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static dscache::fuzz::TempDir dir;
  const std::string path = dir.file("train-images-idx3-ubyte");
  dscache::fuzz::write_bytes(path, data, size);
  const bool looks = dscache::is_idx_images_file(path);
  try {
    const dscache::IdxImages img = dscache::read_idx_images(path);
    FUZZ_CHECK(looks);
    FUZZ_CHECK(img.pixels.size() == uint64_t{img.count} * img.rows * img.cols);
    if (img.count > 0) {
      // The last image lies inside the pixels.
      const uint8_t* last = img.image(img.count - 1);
      FUZZ_CHECK(last + uint64_t{img.rows} * img.cols == img.pixels.data() + img.pixels.size());
    }
  } catch (const dscache::Error&) {
  }
  try {
    const std::vector<uint8_t> labels = dscache::read_idx_labels(path);
    (void)labels;
  } catch (const dscache::Error&) {
  }
  return 0;
}
