// Fuzz target: the .npy header parser (parse_npy_header) on arbitrary bytes.
// Seeds: headers numpy and dscache wrote (v1/v2/v3, every descr, Fortran order, 0-d).
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dscache::NpyHeader h;
  try {
    h = dscache::parse_npy_header(data, size, "fuzz.npy");
  } catch (const dscache::Error&) {
    return 0;
  }
  // What a parsed header promises: the data starts inside what was given, and the sizes the
  // readers compute from it either come out or throw Error (never overflow silently).
  FUZZ_CHECK(h.data_offset <= size);
  try {
    const uint64_t bytes = h.data_bytes();
    FUZZ_CHECK(h.element_count() == 0 || bytes / h.element_count() == h.item_size());
  } catch (const dscache::Error&) {
  }
  // A header we can parse, we can write again (the writer accepts every descr and dimension
  // count the parser does), and read back to the same array description.
  if (!h.fortran_order) {
    const std::string text = dscache::format_npy_header(h.descr, h.shape);
    const dscache::NpyHeader back = dscache::parse_npy_header(text.data(), text.size(), "again");
    FUZZ_CHECK(back.descr == h.descr && back.shape == h.shape && !back.fortran_order);
    FUZZ_CHECK(back.data_offset == text.size());
  }
  return 0;
}
