// The binding of libcache's Mixture (dscache/mixture.h) for dscache.Mixture (_mixture.py), and
// the mixture's part of a Loader's position (MixState) as a dict for Python's state_dict().
// Registered by _dscache.cpp, whose Loader binding takes a Mixture wherever a SampleSource goes.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "_binding.h"
#include "dscache/loader.h"
#include "dscache/mix_order.h"
#include "dscache/mixture.h"
#include "dscache/sample_source.h"

namespace dscache {
namespace {

// One source as _mixture.py passes it: (samples, class names, name, identity, weight, repeat).
using SourceArgs = std::tuple<std::shared_ptr<SampleSource>, std::vector<std::string>, std::string,
                              std::string, double, double>;

std::shared_ptr<Mixture> make_mixture(const std::vector<SourceArgs>& given,
                                      const std::string& batching, uint64_t epoch_samples,
                                      uint64_t stratum, const std::vector<std::string>& classes) {
  std::vector<MixSource> sources;
  for (const auto& [source, names, name, identity, weight, repeat] : given) {
    MixSource s;
    s.source = source;
    s.classes = names;
    s.name = name;
    s.identity = identity;
    s.weight = weight;
    s.repeat = repeat;
    sources.push_back(std::move(s));
  }
  MixtureOptions o;
  o.batching = kMixBatchingNames.parse(batching, "batching");
  o.epoch_samples = epoch_samples;
  o.stratum = stratum;
  o.classes = classes;
  std::shared_ptr<const Mixture> m;
  {
    py::gil_scoped_release nogil;
    m = Mixture::make(std::move(sources), o);
  }
  return std::const_pointer_cast<Mixture>(m);
}

}  // namespace

std::shared_ptr<const Mixture> as_mixture(py::handle source) {
  if (!py::isinstance<Mixture>(source)) return nullptr;
  return source.cast<std::shared_ptr<Mixture>>();
}

py::dict mix_state_dict(const MixState& s) {
  py::dict d;
  d["fingerprint"] = s.fingerprint;
  d["segment"] = s.segment;
  d["segment_start"] = s.segment_start;
  d["segment_drawn"] = s.segment_drawn;
  d["drawn"] = s.drawn;
  d["taken"] = s.taken;
  return d;
}

MixState mix_state_from(const py::dict& d) {
  MixState s;
  s.fingerprint = d["fingerprint"].cast<uint64_t>();
  s.segment = d["segment"].cast<uint32_t>();
  s.segment_start = d["segment_start"].cast<uint64_t>();
  s.segment_drawn = d["segment_drawn"].cast<std::vector<uint64_t>>();
  s.drawn = d["drawn"].cast<std::vector<uint64_t>>();
  s.taken = d["taken"].cast<std::vector<uint64_t>>();
  return s;
}

void bind_mixture(py::module_& m) {
  py::class_<Mixture, std::shared_ptr<Mixture>>(m, "Mixture")
      .def(py::init(&make_mixture), py::arg("sources"), py::arg("batching"),
           py::arg("epoch_samples"), py::arg("stratum"), py::arg("classes"))
      .def("__len__", [](const Mixture& x) { return x.view()->size(); })
      .def_property_readonly("names",
                             [](const Mixture& x) {
                               std::vector<std::string> names;
                               for (size_t k = 0; k < x.sources(); ++k) {
                                 names.push_back(x.source(k).name);
                               }
                               return names;
                             })
      .def_property_readonly("classes", &Mixture::classes)
      .def_property_readonly("counts", &Mixture::counts)
      .def_property_readonly("epoch_samples", &Mixture::epoch_samples)
      .def_property_readonly("repeats", &Mixture::repeats)
      .def_property_readonly(
          "batching",
          [](const Mixture& x) {
            return std::string(kMixBatchingNames.to_string(x.options().batching));
          })
      .def_property_readonly("stratum", [](const Mixture& x) { return x.options().stratum; })
      .def("view", [](const Mixture& x) { return std::const_pointer_cast<SampleSource>(x.view()); })
      .def("offset", &Mixture::offset, py::arg("k"))
      .def("locate", &Mixture::locate, py::arg("i"))
      .def("counts_for", &Mixture::counts_for, py::arg("total"))
      .def("fingerprint", &Mixture::fingerprint, py::arg("stratum"))
      .def("describe_shares", &Mixture::describe_shares)
      // Source k's stream position where epoch `epoch` starts when the shares never changed.
      .def(
          "pure_drawn",
          [](const Mixture& x, uint64_t epoch) { return pure_epoch(x.counts(), epoch).drawn; },
          py::arg("epoch"));
}

}  // namespace dscache
