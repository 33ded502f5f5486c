// Fuzz target: a JPEG stream given to the serve-time decoder (jpeg_info, jpeg_decode,
// jpeg_decode_crop with and without DCT scaling and cropping), as a JPEG cache's sample is.
// Seeds: small JPEGs of every kind a build or a user makes (4:2:0, 4:4:4, grey, progressive,
// restart markers, EXIF, CMYK).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static dscache::JpegScratch scratch;  // reused, as a worker thread does
  dscache::JpegInfo info;
  try {
    info = dscache::jpeg_info(data, size);
  } catch (const dscache::Error&) {
    return 0;
  }
  FUZZ_CHECK(info.channels == 1 || info.channels == 3);
  FUZZ_CHECK(info.height > 0 && info.width > 0);
  if (uint64_t{info.height} * info.width > (uint64_t{1} << 20)) return 0;  // memory, not bugs
  const uint32_t h = info.height, w = info.width;
  for (uint32_t channels : {1u, 3u}) {
    std::vector<uint8_t> out(uint64_t{h} * w * channels);
    try {
      dscache::jpeg_decode(data, size, h, w, channels, out.data(), &scratch);
    } catch (const dscache::Error&) {
    }
    // A crop in the middle, and one of the bottom-right corner, each shrunk by ~3.
    const dscache::CropBox boxes[] = {
        {h / 4, w / 4, std::max(1u, h / 2), std::max(1u, w / 2), true},
        {h - std::max(1u, h / 3), w - std::max(1u, w / 3), std::max(1u, h / 3), std::max(1u, w / 3),
         false},
    };
    for (const dscache::CropBox& box : boxes) {
      const uint32_t oh = std::max(1u, box.height / 3), ow = std::max(1u, box.width / 3);
      std::vector<uint8_t> crop(uint64_t{oh} * ow * channels);
      for (bool savings : {true, false}) {
        try {
          dscache::jpeg_decode_crop(data, size, h, w, channels, box, oh, ow, crop.data(), &scratch,
                                    dscache::JpegDecodeOptions{savings, savings});
        } catch (const dscache::Error&) {
        }
      }
    }
  }
  // The stream decoded as a size it does not have is refused, not misread.
  std::vector<uint8_t> wrong(uint64_t{h + 1} * w * info.channels);
  try {
    dscache::jpeg_decode(data, size, h + 1, w, info.channels, wrong.data(), &scratch);
    FUZZ_CHECK(false);
  } catch (const dscache::Error&) {
  }
  return 0;
}
