// What the files of the _dscache extension share: zero-copy numpy views and the bind_* functions
// PYBIND11_MODULE (_dscache.cpp) calls. Local to the extension; not a header of the package.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dscache/loader.h"
#include "dscache/mixture.h"
#include "dscache/sampler.h"
#include "dscache/transform.h"

namespace dscache {

namespace py = pybind11;

// A numpy array over `data` whose base keeps `owner` (any shared_ptr) alive.
template <typename T>
py::array_t<uint8_t> view_array(const uint8_t* data, std::vector<py::ssize_t> shape,
                                std::shared_ptr<T> owner, bool writeable) {
  auto* keep = new std::shared_ptr<T>(std::move(owner));
  py::capsule base(keep, [](void* p) { delete static_cast<std::shared_ptr<T>*>(p); });
  py::array_t<uint8_t> a(shape, const_cast<uint8_t*>(data), base);
  if (!writeable) {
    reinterpret_cast<py::detail::PyArray_Proxy*>(a.ptr())->flags &=
        ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  }
  return a;
}

void bind_sources(py::module_& m);  // _sources.cpp: SampleSource, Cache, LazyCache
void bind_writer(py::module_& m);   // _writer.cpp: Writer
void bind_order(py::module_& m);    // _order.cpp: epoch_order, epoch_sample, rank_batch_at
void bind_mixture(py::module_& m);  // _mixture.cpp: Mixture

// _options.cpp: dscache.Transform's values, and the Loader's keywords, as libcache's options
// (names parsed by libcache's tables: an unknown one is InvalidArgument listing the names).
TransformOptions transform_options(const std::string& crop, uint32_t height, uint32_t width,
                                   double scale_min, double scale_max, double ratio_min,
                                   double ratio_max, bool flip);
LoaderOptions make_loader_options(uint32_t batch_size, bool drop_last, const std::string& shuffle,
                                  uint64_t block, uint64_t window_blocks, uint64_t block_bytes,
                                  uint64_t window_bytes, uint32_t rank, uint32_t world_size,
                                  const std::string& rank_tail, uint32_t workers, uint32_t prefetch,
                                  const std::string& crop, uint32_t height, uint32_t width,
                                  double scale_min, double scale_max, double ratio_min,
                                  double ratio_max, bool flip,
                                  const std::optional<std::vector<std::string>>& fields,
                                  double min_box_visibility, uint32_t batch_stride,
                                  uint32_t batch_offset);

// _mixture.cpp: the Mixture a Python object binds, or null when it is not one (a SampleSource);
// a Loader position's mixture part as a dict of ints and lists (fingerprint, segment,
// segment_start, segment_drawn, drawn, taken) and back.
std::shared_ptr<const Mixture> as_mixture(py::handle source);
py::dict mix_state_dict(const MixState& s);
MixState mix_state_from(const py::dict& d);

// The sampler's options Loader and epoch_order share (the byte sizes are the Loader's own);
// _order.cpp.
SamplerOptions sampler_options(const std::string& shuffle, uint64_t block, uint64_t window_blocks,
                               uint32_t rank, uint32_t world_size, const std::string& rank_tail);

}  // namespace dscache
