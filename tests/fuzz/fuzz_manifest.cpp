// Fuzz target: the manifest parser and validator (manifest_from_json) on arbitrary text.
// Seeds: manifests `dscache build` wrote (fixed, ragged, JPEG, HDF5, a part of a partitioned
// build).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  dscache::Manifest m;
  try {
    m = dscache::manifest_from_json(text, "manifest.json");
  } catch (const dscache::Error&) {
    return 0;
  }
  // A manifest that validated serializes, and its JSON validates again to the same manifest.
  const std::string again = dscache::to_json(m);
  const dscache::Manifest back = dscache::manifest_from_json(again, "again.json");
  FUZZ_CHECK(dscache::to_json(back) == again);
  return 0;
}
