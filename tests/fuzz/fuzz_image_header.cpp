// Fuzz target: the image header sniffer (sniff_format, read_image_header) on arbitrary bytes. It
// must never read past `size` (ASan) and never claim dimensions for an unknown format.
// Seeds: tiny images of every format the sniffer knows.
#include <cstddef>
#include <cstdint>

#include "dscache/ingest/image_decode.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const dscache::ImageFormat f = dscache::sniff_format(data, size);
  const dscache::ImageHeaderInfo h = dscache::read_image_header(data, size);
  FUZZ_CHECK(h.format == f);
  FUZZ_CHECK(!h.dims_known || f != dscache::ImageFormat::kUnknown);
  FUZZ_CHECK(dscache::to_string(f) != nullptr);
  // Every prefix is a truncated header: it must be handled as carefully as the whole.
  if (size > 0) {
    const dscache::ImageHeaderInfo cut = dscache::read_image_header(data, size - 1);
    FUZZ_CHECK(!cut.dims_known || cut.format != dscache::ImageFormat::kUnknown);
  }
  return 0;
}
