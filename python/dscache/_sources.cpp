// The binding of libcache's sample sources (dscache/sample_source.h): SampleSource, Cache and
// LazyCache, for dscache.Cache and dscache.LazyCache in __init__.py. Registered by _dscache.cpp.
//
// A sample is a view into the source only where numpy may read it safely (see get_sample).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "_binding.h"
#include "dscache/cache.h"
#include "dscache/error.h"
#include "dscache/fields.h"
#include "dscache/lazy_cache.h"
#include "dscache/manifest.h"
#include "dscache/sample_source.h"

namespace dscache {
namespace {

std::vector<py::ssize_t> sample_dims(const SampleShape& s) {
  return {static_cast<py::ssize_t>(s.height), static_cast<py::ssize_t>(s.width),
          static_cast<py::ssize_t>(s.channels)};
}

uint64_t check_index(const SampleSource& src, int64_t i) {
  const int64_t n = static_cast<int64_t>(src.size());
  if (i < 0) i += n;
  if (i < 0 || i >= n) throw py::index_error("sample index out of range");
  return static_cast<uint64_t>(i);
}

// Sample i of any source: a read-only view that holds the source when the whole cache is in
// private memory (in-process, every shard resident), otherwise a fresh copy. A view into a file
// mapping would be read by numpy outside libcache's SIGBUS guard: a shard truncated under it
// would kill the interpreter (exit 135) instead of raising dscache.Error.
py::tuple get_sample(const std::shared_ptr<const SampleSource>& src, int64_t index) {
  const uint64_t i = check_index(*src, index);
  const bool copy = src->encoded() || [&] {
    auto cache = std::dynamic_pointer_cast<const Cache>(src);
    return !cache || cache->memory_mode() != MemoryMode::kInProcess ||
           cache->resident_bytes() != cache->stored_bytes();
  }();
  if (!copy) {
    try {
      ImageView v;
      {
        py::gil_scoped_release nogil;
        v = src->view(i);  // a lazy cache may decode here
      }
      SampleShape s{v.height, v.width, v.channels};
      return py::make_tuple(view_array(v.data, sample_dims(s), src, false), v.label);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kUnsupported) throw;
    }
  }
  const SampleShape s = src->sample_shape(i);
  if (src->encoded() && s.bytes() > (uint64_t{64} << 20)) {
    // A JPEG sample's size is its index row's claim: before an array that large is allocated,
    // the stream's own header must agree (a 1x1 decode_crop checks it and names shard and
    // sample), so a lying row is dscache.Error, not a MemoryError from a 12.9 GB allocation.
    uint8_t pixel[3];
    py::gil_scoped_release nogil;
    src->decode_crop(i, CropBox{0, 0, 1, 1, false}, 1, 1, pixel);
  }
  py::array_t<uint8_t> out(sample_dims(s));
  uint8_t* dst = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    src->copy_sample(i, dst);
  }
  return py::make_tuple(out, src->label(i));
}

py::dict field_dict(const FieldSpec& f) {
  py::dict d;
  d["name"] = f.name;
  d["kind"] = to_string(f.kind);
  d["dtype"] = to_string(f.dtype);
  d["shape"] = f.shape;
  d["rows_of"] = f.rows_of;
  d["classes"] = f.classes;
  d["allow_nonfinite"] = f.allow_nonfinite;
  return d;
}

// Sample i's value of field f as a uint8 array (a copy) and its row count; __init__.py gives it
// its dtype and shape. A copy, never a view, made by Cache::copy_field under libcache's SIGBUS
// guard: numpy reading the mapping itself would kill the interpreter if the file shrank.
py::tuple field_value(const Cache& c, int64_t index, size_t f) {
  const uint64_t i = check_index(c, index);
  FieldView v;
  {
    py::gil_scoped_release nogil;
    v = c.field(i, f);
  }
  py::array_t<uint8_t> out(static_cast<py::ssize_t>(v.bytes));
  if (v.bytes > 0) {
    uint8_t* dst = out.mutable_data();
    py::gil_scoped_release nogil;
    c.copy_field(i, f, dst);
  }
  return py::make_tuple(out, v.rows);
}

MemoryMode parse_memory(const std::string& s) { return kMemoryModeNames.parse(s, "memory"); }
AccessHint parse_hint(const std::string& s) { return kAccessHintNames.parse(s, "hint"); }

py::dict manifest_dict(const Manifest& m) {
  py::dict d;
  d["format_version"] = m.format_version;
  d["layout"] = to_string(m.layout);
  d["storage"] = to_string(m.storage);
  d["codec"] = to_string(m.codec);
  d["dtype"] = m.dtype;
  d["height"] = m.height;
  d["width"] = m.width;
  d["channels"] = m.channels;
  d["channel_order"] = m.channel_order;
  d["count"] = m.count;
  d["classes"] = m.classes;
  py::list fields;
  for (const FieldSpec& f : m.fields) fields.append(field_dict(f));
  d["fields"] = fields;
  d["class_counts"] = m.class_counts;
  py::list shards;
  for (const ShardEntry& s : m.shards) {
    py::dict e;
    e["file"] = s.file;
    e["first"] = s.first;
    e["count"] = s.count;
    e["bytes"] = s.bytes;
    e["xxh64"] = s.xxh64;
    py::dict files;
    for (size_t f = 0; f < s.fields.size() && f < m.fields.size(); ++f) {
      py::dict ff;
      ff["values"] = s.fields[f].values.file;
      if (!s.fields[f].offsets.file.empty()) ff["offsets"] = s.fields[f].offsets.file;
      files[py::str(m.fields[f].name)] = ff;
    }
    e["fields"] = files;
    shards.append(e);
  }
  d["shards"] = shards;
  d["skipped"] = m.skipped;
  d["alpha"] = to_string(m.recipe.alpha);
  d["transparent"] = m.transparent_known ? py::object(py::int_(m.transparent)) : py::none();
  py::dict src;
  src["kind"] = m.source.kind;
  src["root"] = m.source.root;
  src["entries"] = m.source.entries;
  src["digest"] = m.source.digest;
  d["source"] = src;
  d["labels_xxh64"] = m.labels.xxh64;
  d["checksums_xxh64"] = m.checksums.xxh64;
  d["index_xxh64"] = m.index.xxh64;
  d["tool_version"] = m.tool_version;
  d["created_utc"] = m.created_utc;
  return d;
}

// A Python decode function for a LazyCache, called from the Loader's worker threads: takes the
// GIL for the call, copies the returned array into the slot. Deleted with the GIL held.
DecodeFn python_decode(py::function fn, SampleShape shape) {
  std::shared_ptr<py::function> f(new py::function(std::move(fn)), [](py::function* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
  const uint64_t bytes = shape.bytes();
  return [f, bytes](uint64_t i, uint8_t* out, std::string* reason) -> bool {
    py::gil_scoped_acquire gil;
    try {
      py::object r = (*f)(i);
      auto a = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>::ensure(r);
      if (!a) {
        *reason = "decode function did not return a uint8 array";
        return false;
      }
      if (static_cast<uint64_t>(a.nbytes()) != bytes) {
        *reason = "decode function returned " + std::to_string(a.nbytes()) + " bytes, expected " +
                  std::to_string(bytes);
        return false;
      }
      std::memcpy(out, a.data(), bytes);
      return true;
    } catch (py::error_already_set& e) {
      *reason = std::string("decode function raised ") + e.what();
      return false;
    }
  };
}

}  // namespace

void bind_sources(py::module_& m) {
  py::class_<SampleSource, std::shared_ptr<SampleSource>>(m, "SampleSource")
      .def("__len__", [](const SampleSource& s) { return s.size(); })
      .def_property_readonly("layout", [](const SampleSource& s) { return to_string(s.layout()); })
      .def_property_readonly("shape",
                             [](const SampleSource& s) {
                               const SampleShape sh = s.shape();
                               return py::make_tuple(sh.height, sh.width, sh.channels);
                             })
      .def("label", [](const SampleSource& s, int64_t i) { return s.label(check_index(s, i)); })
      .def("sample_shape",
           [](const SampleSource& s, int64_t i) {
             const SampleShape sh = s.sample_shape(check_index(s, i));
             return py::make_tuple(sh.height, sh.width, sh.channels);
           })
      .def("get", [](std::shared_ptr<SampleSource> s, int64_t i) { return get_sample(s, i); });

  py::class_<Cache, SampleSource, std::shared_ptr<Cache>>(m, "Cache")
      .def(py::init([](const std::string& dir, const std::string& memory, uint64_t budget,
                       const std::string& hint, bool verify) {
             CacheOptions o;
             o.memory = parse_memory(memory);
             o.memory_budget = budget;
             o.hint = parse_hint(hint);
             o.verify_checksums = verify;
             py::gil_scoped_release nogil;
             return std::const_pointer_cast<Cache>(Cache::open(dir, o));
           }),
           py::arg("dir"), py::arg("memory"), py::arg("memory_budget"), py::arg("hint"),
           py::arg("verify_checksums"))
      .def_property_readonly("manifest", [](const Cache& c) { return manifest_dict(c.manifest()); })
      .def_property_readonly("dir", &Cache::dir)
      .def_property_readonly("memory_mode",
                             [](const Cache& c) { return to_string(c.memory_mode()); })
      .def_property_readonly("resident_bytes", &Cache::resident_bytes)
      .def_property_readonly("stored_bytes", &Cache::stored_bytes)
      .def("field_index", &Cache::field_index, py::arg("name"))
      .def("field", &field_value, py::arg("i"), py::arg("field"));

  py::class_<LazyCache, SampleSource, std::shared_ptr<LazyCache>>(m, "LazyCache")
      .def(py::init([](const std::string& path, uint64_t count, uint32_t h, uint32_t w, uint32_t c,
                       std::vector<int64_t> labels, py::function decode, uint64_t digest,
                       bool verify_hits) {
             SampleShape shape{h, w, c};
             LazyCacheOptions o;
             o.source_digest = digest;
             o.verify_hits = verify_hits;
             DecodeFn fn = python_decode(std::move(decode), shape);
             py::gil_scoped_release nogil;
             return LazyCache::open(path, count, shape, std::move(labels), std::move(fn), o);
           }),
           py::arg("path"), py::arg("count"), py::arg("height"), py::arg("width"),
           py::arg("channels"), py::arg("labels"), py::arg("decode"), py::arg("source_digest"),
           py::arg("verify_hits"))
      .def_property_readonly("filled", &LazyCache::filled)
      .def_property_readonly("hits", &LazyCache::hits)
      .def_property_readonly("misses", &LazyCache::misses);
}

}  // namespace dscache
