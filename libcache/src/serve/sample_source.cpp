// SampleSource's defaults for sources that store pixels (every source but a JPEG cache).
#include "dscache/sample_source.h"

#include <string>

#include "dscache/error.h"

namespace dscache {

SampleShape SampleSource::sample_shape(uint64_t /*i*/) const { return shape(); }

void SampleSource::decode_crop(uint64_t i, const CropBox& /*box*/, uint32_t /*out_h*/,
                               uint32_t /*out_w*/, uint8_t* /*out*/) const {
  throw Error(ErrorKind::kUnsupported, "",
              "sample " + std::to_string(i) +
                  ": decode_crop() is for encoded sources (JPEG caches); this source stores "
                  "pixels");
}

const std::vector<FieldSpec>& SampleSource::fields() const {
  static const std::vector<FieldSpec> kNone;
  return kNone;
}

FieldView SampleSource::field(uint64_t i, size_t f) const {
  throw Error(ErrorKind::kUnsupported, "",
              "sample " + std::to_string(i) + ", field " + std::to_string(f) +
                  ": this source carries no fields");
}

}  // namespace dscache
