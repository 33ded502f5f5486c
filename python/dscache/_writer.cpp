// The binding of libcache's CacheWriter (dscache/cache_writer.h) for dscache.Writer in
// __init__.py: numpy arrays in, a published cache out. Registered by _dscache.cpp.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "_binding.h"
#include "dscache/cache_writer.h"
#include "dscache/error.h"
#include "dscache/fields.h"
#include "dscache/manifest.h"
#include "dscache/sampler.h"

namespace py = pybind11;

namespace dscache {
namespace {

// One FieldSpec from the (name, kind, dtype, shape, rows_of, classes, allow_nonfinite) tuple
// _writer.py makes of a dscache.Field; the spelling is checked by validate_fields() at begin(),
// which names it.
FieldSpec field_spec(const py::tuple& t) {
  if (t.size() != 7) throw py::value_error("a field spec is (name, kind, dtype, shape, ...)");
  FieldSpec f;
  f.name = t[0].cast<std::string>();
  f.kind = kFieldKindNames.parse(t[1].cast<std::string>(), "fields '" + f.name + "' kind");
  f.dtype = kFieldTypeNames.parse(t[2].cast<std::string>(), "fields '" + f.name + "' dtype");
  f.shape = t[3].cast<std::vector<uint32_t>>();
  f.rows_of = t[4].cast<std::string>();
  f.classes = t[5].cast<std::vector<std::string>>();
  f.allow_nonfinite = t[6].cast<bool>();
  return f;
}

// The arrays _writer.py converted one sample's field values to (C-contiguous, little-endian, in
// each field's dtype), as FieldData. The list holds the arrays while the GIL is released.
std::vector<FieldData> field_data(const py::list& values, const std::string& name) {
  std::vector<FieldData> out;
  out.reserve(values.size());
  for (const py::handle& v : values) {
    const py::array a = py::reinterpret_borrow<py::array>(v);
    if (!py::isinstance<py::array>(v) || !(a.flags() & py::array::c_style)) {
      throw Error(ErrorKind::kInvalidArgument, name, "a field value must be a C-contiguous array");
    }
    out.push_back(FieldData{a.data(), static_cast<uint64_t>(a.nbytes())});
  }
  return out;
}

// Owns the CacheWriter; not thread-safe (the Python class says so). Every call releases the GIL
// while it writes: the numpy array it reads is held by the call's arguments.
class PyWriter {
 public:
  PyWriter(const std::string& path, const CacheWriterOptions& o) {
    py::gil_scoped_release nogil;
    w_ = CacheWriter::open(path, o);
  }

  void write(const py::array& image, int64_t label, const std::string& name,
             const py::list& fields) {
    const py::array_t<uint8_t, py::array::c_style> a =
        py::array_t<uint8_t, py::array::c_style>::ensure(image);
    if (!a || a.ndim() < 2 || a.ndim() > 3) {
      throw Error(ErrorKind::kInvalidArgument, name,
                  "image must be a (H, W) or (H, W, C) uint8 array");
    }
    const uint32_t channels = a.ndim() == 3 ? static_cast<uint32_t>(a.shape(2)) : 1;
    if (channels != channels_) {
      throw Error(ErrorKind::kInvalidArgument, name,
                  "image has " + std::to_string(channels) + " channels, the cache " +
                      std::to_string(channels_));
    }
    if (a.shape(0) <= 0 || a.shape(1) <= 0 || a.shape(0) > 65500 || a.shape(1) > 65500) {
      throw Error(ErrorKind::kInvalidArgument, name, "image sides must be 1..65500");
    }
    const auto h = static_cast<uint32_t>(a.shape(0)), w = static_cast<uint32_t>(a.shape(1));
    const std::vector<FieldData> values = field_data(fields, name);
    py::gil_scoped_release nogil;
    writer().append(a.data(), h, w, label, name, nullptr, values.empty() ? nullptr : values.data());
  }

  void write_encoded(const py::bytes& data, uint32_t height, uint32_t width, int64_t label,
                     const std::string& name, const py::list& fields) {
    std::string s = data;  // a copy: the GIL is released while it is written
    const std::vector<FieldData> values = field_data(fields, name);
    py::gil_scoped_release nogil;
    writer().append_encoded(reinterpret_cast<const uint8_t*>(s.data()), s.size(), height, width,
                            label, name, nullptr, values.empty() ? nullptr : values.data());
  }

  void skip(const std::string& name, const std::string& reason) { writer().skip(name, reason); }
  void cut_shard() {
    py::gil_scoped_release nogil;
    writer().cut_shard();
  }
  std::string publish() {
    py::gil_scoped_release nogil;
    writer().publish();
    const std::string out = w_->output();
    w_.reset();  // releases the lock
    return out;
  }
  void abandon() {
    py::gil_scoped_release nogil;
    writer().abandon();
    w_.reset();
  }
  void close() {  // leaves the partial directory for a resume
    py::gil_scoped_release nogil;
    w_.reset();
  }
  uint64_t position() const { return cw().position(); }
  uint64_t count() const { return cw().count(); }
  uint64_t resumed() const { return cw().resumed(); }
  uint64_t skipped() const { return cw().skipped(); }
  uint64_t shards() const { return cw().shard_count(); }
  std::string partial() const { return cw().partial(); }
  bool closed() const { return !w_; }
  void set_channels(uint32_t c) { channels_ = c; }

 private:
  CacheWriter& writer() {
    if (!w_) throw Error(ErrorKind::kInvalidArgument, "", "the writer is closed");
    return *w_;
  }
  const CacheWriter& cw() const {
    if (!w_) throw Error(ErrorKind::kInvalidArgument, "", "the writer is closed");
    return *w_;
  }
  std::unique_ptr<CacheWriter> w_;
  uint32_t channels_ = 3;
};

}  // namespace

void bind_writer(py::module_& m) {
  py::class_<PyWriter>(m, "Writer")
      .def(py::init([](const std::string& path, const std::string& storage,
                       const std::string& layout, const std::string& codec, uint32_t height,
                       uint32_t width, uint32_t channels, uint32_t quality, uint64_t shard_bytes,
                       std::vector<std::string> classes, bool shuffled, uint64_t shuffle_seed,
                       uint32_t max_side, const std::vector<py::tuple>& fields, bool force,
                       bool resume) {
             CacheWriterOptions o;
             o.storage = kStorageNames.parse(storage, "storage");
             o.layout = kLayoutNames.parse(layout, "layout");
             o.codec = kCodecNames.parse(codec, "codec");
             o.recipe.height = height;
             o.recipe.width = width;
             o.recipe.channels = channels;
             if (channels == 4) o.recipe.alpha = AlphaMode::kKeep;  // RGBA: the alpha kept
             o.recipe.quality = o.codec == Codec::kJpeg ? quality : 0;
             o.recipe.shard_bytes = shard_bytes;
             o.recipe.shuffled = shuffled;
             o.recipe.shuffle_seed = shuffled ? shuffle_seed : 0;
             o.recipe.max_side = max_side;
             o.classes = std::move(classes);
             for (const py::tuple& t : fields) o.fields.push_back(field_spec(t));
             o.source = SourceRecord{"python", "", "", 0, 0};
             o.force = force;
             o.resume = resume;
             o.command = "dscache.Writer (python)";
             auto w = std::make_unique<PyWriter>(path, o);
             w->set_channels(channels);
             return w;
           }),
           py::arg("path"), py::arg("storage"), py::arg("layout"), py::arg("codec"),
           py::arg("height"), py::arg("width"), py::arg("channels"), py::arg("quality"),
           py::arg("shard_bytes"), py::arg("classes"), py::arg("shuffled"), py::arg("shuffle_seed"),
           py::arg("max_side"), py::arg("fields"), py::arg("force"), py::arg("resume"))
      .def("write", &PyWriter::write, py::arg("image"), py::arg("label"), py::arg("name"),
           py::arg("fields"))
      .def("write_encoded", &PyWriter::write_encoded, py::arg("data"), py::arg("height"),
           py::arg("width"), py::arg("label"), py::arg("name"), py::arg("fields"))
      .def("skip", &PyWriter::skip, py::arg("name"), py::arg("reason"))
      .def("cut_shard", &PyWriter::cut_shard)
      .def("publish", &PyWriter::publish)
      .def("abandon", &PyWriter::abandon)
      .def("close", &PyWriter::close)
      .def_property_readonly("position", &PyWriter::position)
      .def_property_readonly("count", &PyWriter::count)
      .def_property_readonly("resumed", &PyWriter::resumed)
      .def_property_readonly("skipped", &PyWriter::skipped)
      .def_property_readonly("shards", &PyWriter::shards)
      .def_property_readonly("partial", &PyWriter::partial)
      .def_property_readonly("closed", &PyWriter::closed);

  m.def(
      "build_order",
      [](uint64_t n, uint64_t seed) {
        const std::vector<uint64_t> order = build_order(n, seed);
        py::array_t<uint64_t> out(static_cast<py::ssize_t>(order.size()));
        std::copy(order.begin(), order.end(), out.mutable_data());
        return out;
      },
      py::arg("n"), py::arg("seed"));
}

}  // namespace dscache
