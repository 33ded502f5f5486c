// _dscache: the pybind11 binding of libcache's public contract (Cache, LazyCache, Mixture, Loader,
// Error).
// The Python package dscache (__init__.py) wraps it; users import that, not this.
//
// Zero-copy: Cache.view() and Loader.next(copy=False) return numpy arrays that point into the
// Cache's mappings and the Loader's batch buffers. A view of a sample holds the Cache; a view of a
// batch holds the buffer it points into (the Loader's allocator here frees a buffer only when the
// Loader released it and no view of it is alive), so a view never points at freed memory. By
// default (Python's copy=True) the Loader hands each batch's buffer off (hand_off_images) and
// the batch's pixels never change; with copy=False the ring is reused and the C++ contract
// holds for the contents: a batch's pixels are valid until the next batch.
// A batch's field values (masks, boxes, ...) are handed off with its images when copy=True
// (views of buffers of their own, see field_arrays), copies with copy=False; labels, indices and
// row offsets are copies.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "_binding.h"
#include "_buffer_pool.h"
#include "dscache/direct_read.h"
#include "dscache/error.h"
#include "dscache/fields.h"
#include "dscache/loader.h"
#include "dscache/manifest.h"
#include "dscache/remote.h"
#include "dscache/sample_source.h"
#include "dscache/sampler.h"
#include "dscache/transform.h"

namespace py = pybind11;

namespace dscache {
namespace {

// Raises the dscache.<Kind>Error Python class for `e` (defined in dscache/_errors.py, so that
// users can subclass and pickle them like any Python exception).
void raise_python_error(const Error& e) {
  py::object make = py::module_::import("dscache._errors").attr("from_cpp");
  py::object exc = make(to_string(e.kind()), e.path(), e.reason(), std::string(e.what()));
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
}

// The Loader as Python sees it: views that hold their buffers, the GIL released whenever it may
// wait for worker threads. The C++ Loader has one consumer; since the GIL is released while it
// works, a second Python thread could enter it: that is refused with an error, not undefined.
// Thrown by the Loader's wait_poll when a signal handler raised: the Python exception is set.
struct Interrupted {};

// The batch's fields as [(name, values, offsets or None)]: `values` an array of the field's dtype
// and FieldBatch::shape, `offsets` (variable kinds) an int64 (size + 1,) copy. With `pool` (the
// Loader hands its field buffers off, LoaderOptions::field_allocator) values are views whose
// base holds the pool's buffer, as the images' do: no copy, and never refilled while an array
// refers to it. Without (copy=False: the C++ Loader refills a slot's field buffers, and grows
// them, under a view) they are copies. `names` holds each field's (name, dtype) objects, made on
// the first batch (a Loader's fields never change), not parsed again for every batch.
py::list field_arrays(const Batch& b, BufferPool* pool,
                      std::vector<std::pair<py::str, py::dtype>>* names) {
  py::list out;
  if (names->size() != b.fields.size()) {
    names->clear();
    for (const FieldBatch& f : b.fields) {
      names->emplace_back(py::str(f.spec->name), py::dtype(npy_descr(f.spec->dtype)));
    }
  }
  for (size_t i = 0; i < b.fields.size(); ++i) {
    const FieldBatch& f = b.fields[i];
    std::vector<py::ssize_t> shape(f.shape.begin(), f.shape.end());
    const py::dtype& dtype = (*names)[i].second;
    py::array values;
    if (pool != nullptr) {
      std::shared_ptr<Buffer> held = pool->hold(f.data);
      if (!held) {  // cannot happen with our allocator; never hand out an unowned pointer
        throw Error(ErrorKind::kIOError, "", "field '" + f.spec->name + "': buffer not owned");
      }
      auto* keep = new std::shared_ptr<Buffer>(std::move(held));
      py::capsule base(keep, [](void* p) { delete static_cast<std::shared_ptr<Buffer>*>(p); });
      values = py::array(dtype, shape, f.data, base);
    } else {
      values = py::array(dtype, shape);
      if (f.bytes > 0) std::memcpy(values.mutable_data(), f.data, f.bytes);
    }
    if (static_cast<uint64_t>(values.nbytes()) != f.bytes) {  // our invariant: shape x dtype
      throw Error(ErrorKind::kIOError, "",
                  "field '" + f.spec->name + "': batch holds " + std::to_string(f.bytes) +
                      " bytes, shape says " + std::to_string(values.nbytes()));
    }
    py::object offsets = py::none();
    if (f.offsets != nullptr) {
      py::array_t<int64_t> o(static_cast<py::ssize_t>(b.size) + 1);
      std::memcpy(o.mutable_data(), f.offsets, sizeof(int64_t) * (b.size + 1));
      offsets = o;
    }
    out.append(py::make_tuple((*names)[i].first, values, offsets));
  }
  return out;
}

class PyLoader {
 public:
  // Over `mixture` when it is not null, else over `source`. slots: dscache.torch's ring (see
  // attach_shared_slots), attached before the C++ Loader allocates its ring buffers, so that its
  // first batches fill slots too; null: none.
  PyLoader(std::shared_ptr<const SampleSource> source, std::shared_ptr<const Mixture> mixture,
           const LoaderOptions& base, std::shared_ptr<SharedSlots> slots)
      : pool_(std::make_shared<BufferPool>()) {
    if (slots) pool_->attach(std::move(slots));
    LoaderOptions o = base;
    std::shared_ptr<BufferPool> pool = pool_;
    o.allocator.allocate = [pool](size_t bytes) { return pool->allocate(bytes); };
    o.allocator.release = [pool](void* p) { pool->release(p); };
    if (o.hand_off_images) {  // field values too, in host memory (never a shared slot)
      o.field_allocator.allocate = [pool](size_t bytes) { return pool->allocate(bytes, false); };
      o.field_allocator.release = o.allocator.release;
    }
    fields_handed_off_ = o.hand_off_images;
    // Ctrl-C while next() waits: Python's handler only sets a flag; run it here (with the GIL)
    // and leave the wait when it raised (KeyboardInterrupt), so a stalled epoch is interruptible.
    o.wait_poll = [] {
      py::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) throw Interrupted();  // the exception stays set
    };
    py::gil_scoped_release nogil;
    loader_ = mixture ? std::make_unique<Loader>(std::move(mixture), o)
                      : std::make_unique<Loader>(std::move(source), o);
  }
  ~PyLoader() { close(); }

  // Stops and joins the worker threads and frees the C++ Loader; later calls raise. Called by
  // the package's atexit hook for every live Loader, so that no worker is inside Python (a
  // LazyCache's decode function) when the interpreter finalizes. In a forked child the Loader
  // is the parent's: its threads do not exist here and its mutexes may be held forever, so it
  // is left alone (leaked), never joined.
  // This process is a fork's child: the Loader's threads stayed in the parent.
  void mark_forked() { forked_ = true; }

  void close() {
    if (!loader_) return;
    if (forked()) {
      (void)loader_.release();  // see above: destroying it would join threads that are not ours
      return;
    }
    if (busy_) return;  // another Python thread is inside next(): it owns the Loader until then
    // Workers may be waiting for the GIL (a Python decode function of a LazyCache): stopping
    // them must not hold it.
    py::gil_scoped_release nogil;
    loader_.reset();
  }

  void start_epoch(uint64_t seed, uint64_t epoch) {
    Exclusive ex(this, true);
    py::gil_scoped_release nogil;
    loader_->start_epoch(seed, epoch);
  }
  void restore(uint64_t seed, uint64_t epoch, uint64_t cursor) {
    Exclusive ex(this, true);
    py::gil_scoped_release nogil;
    loader_->restore(LoaderPosition{seed, epoch, cursor});
  }

  // (images NHWC uint8 view, labels int64 copy, indices uint64 copy or None, batch index,
  // fields [(name, values, offsets or None)]: see field_arrays; a mixture's first is ("source",
  // uint32 copy, None)) or None at the end of the epoch.
  // The view holds its buffer: with hand_off_images a buffer of its own, else one of the ring's.
  py::object next(bool with_indices) {
    const Batch* b = nullptr;
    try {
      Exclusive ex(this);
      py::gil_scoped_release nogil;
      b = loader_->next();
    } catch (const Interrupted&) {
      throw py::error_already_set();  // the signal handler's exception, set by wait_poll
    }
    if (b == nullptr) return py::none();
    std::vector<py::ssize_t> dims{
        static_cast<py::ssize_t>(b->size), static_cast<py::ssize_t>(b->height),
        static_cast<py::ssize_t>(b->width), static_cast<py::ssize_t>(b->channels)};
    std::shared_ptr<Buffer> held = pool_->hold(b->images);
    if (!held) {  // cannot happen with our allocator; never hand out an unowned pointer
      throw Error(ErrorKind::kIOError, "", "batch buffer not owned by the Python loader");
    }
    py::array_t<uint8_t> images = view_array(b->images, dims, held, true);
    py::array_t<int64_t> labels(static_cast<py::ssize_t>(b->size));
    std::memcpy(labels.mutable_data(), b->labels, sizeof(int64_t) * b->size);
    py::list fields = field_arrays(*b, fields_handed_off_ ? pool_.get() : nullptr, &field_names_);
    if (b->sources != nullptr) {
      py::array_t<uint32_t> sources(static_cast<py::ssize_t>(b->size));
      std::memcpy(sources.mutable_data(), b->sources, sizeof(uint32_t) * b->size);
      fields.insert(0, py::make_tuple("source", sources, py::none()));
    }
    if (!with_indices) return py::make_tuple(images, labels, py::none(), b->index, fields);
    py::array_t<uint64_t> indices(static_cast<py::ssize_t>(b->size));
    std::memcpy(indices.mutable_data(), b->indices, sizeof(uint64_t) * b->size);
    return py::make_tuple(images, labels, indices, b->index, fields);
  }

  // Takes the rest of the epoch in C++, nothing done with the batches but reading one byte each:
  // what a C++ consumer costs, for bench/py_loader.py to compare a Python loop with in the same
  // process and under the same load. Returns the samples taken.
  uint64_t drain() {
    uint64_t samples = 0;
    try {
      Exclusive ex(this);
      py::gil_scoped_release nogil;
      volatile uint8_t sink = 0;
      while (const Batch* b = loader_->next()) {
        samples += b->size;
        sink = static_cast<uint8_t>(sink + b->images[0]);
      }
    } catch (const Interrupted&) {
      throw py::error_already_set();
    }
    return samples;
  }

  // dscache.torch's DataLoader worker: later image buffers that fit come from the free slots of
  // the ring file at `path` (see _buffer_pool.h), so the Loader fills batches where the main
  // process reads them. Needs fresh_batches (hand-off: each batch its own buffer).
  void attach_shared_slots(const std::string& path, uint64_t header_bytes, uint64_t slot_bytes,
                           uint32_t slots) {
    pool_->attach(SharedSlots::map(path, header_bytes, slot_bytes, slots));
  }
  // The slot `images` (a batch's images) fills from its start, now marked in flight (flag 1),
  // or -1 when they are not in a slot.
  int hand_slot(const py::array& images) {
    std::shared_ptr<SharedSlots> s = pool_->shared();
    if (!s || !(images.flags() & py::array::c_style) ||
        static_cast<uint64_t>(images.nbytes()) > s->slot_bytes()) {
      return -1;
    }
    const int k = s->slot_of(images.data());
    if (k >= 0) s->mark_in_flight(k);
    return k;
  }
  // A free slot for a copy, marked in flight, or -1 (none free, or no slots attached).
  int claim_slot() {
    std::shared_ptr<SharedSlots> s = pool_->shared();
    return s ? s->claim() : -1;
  }
  // (image buffers allocated in a shared slot, in host memory) since attach_shared_slots().
  std::pair<uint64_t, uint64_t> slot_counts() { return pool_->counts(); }

  py::tuple position() const {
    check_usable();
    const LoaderPosition p = loader_->position();
    return py::make_tuple(p.seed, p.epoch, p.cursor);
  }
  py::dict sampler_options() const {
    check_usable();
    const SamplerOptions& s = loader_->sampler_options();
    py::dict d;
    d["shuffle"] = kShuffleNames.to_string(s.shuffle);
    d["block"] = s.block;
    d["window_blocks"] = s.window_blocks;
    d["block_bytes"] = s.block_bytes;
    d["window_bytes"] = s.window_bytes;
    d["rank"] = s.rank;
    d["world_size"] = s.world_size;
    d["rank_tail"] = kRankTailNames.to_string(s.tail);
    return d;
  }
  // (seed, epoch, sample, the mixture's MixState as a dict or None): Loader::epoch_position().
  py::tuple epoch_position() const {
    check_usable();
    if (rebuilding_) {  // a mixture's order is being rebuilt without the GIL: not readable now
      throw Error(ErrorKind::kInvalidArgument, "",
                  "Loader: state_dict() while another thread starts, restores or resumes an "
                  "epoch (take positions on the thread that iterates)");
    }
    const EpochPosition p = loader_->epoch_position();
    py::object mix = loader_->mixture() ? py::object(mix_state_dict(p.mix)) : py::none();
    return py::make_tuple(p.seed, p.epoch, p.sample, mix);
  }
  // Loader::resume(); new_weights: WeightChange::kContinue.
  void resume(uint64_t seed, uint64_t epoch, uint64_t sample, const std::optional<py::dict>& mix,
              bool new_weights) {
    const EpochPosition p{seed, epoch, sample, mix ? mix_state_from(*mix) : MixState{}};
    Exclusive ex(this, true);
    py::gil_scoped_release nogil;
    loader_->resume(p, new_weights ? WeightChange::kContinue : WeightChange::kRefuse);
  }
  uint64_t cursor_at(uint64_t sample) const {
    check_usable();
    return loader_->cursor_at(sample);
  }
  uint64_t batches_per_epoch() const {
    check_usable();
    return loader_->batches_per_epoch();
  }
  bool reads_direct() const {
    check_usable();
    return loader_->reads_direct();
  }
  std::string direct_read_reason() const {
    check_usable();
    return loader_->direct_read_reason();
  }
  uint64_t samples_per_epoch() const {
    check_usable();
    return loader_->samples_per_epoch();
  }
  double take_wait_seconds() {
    check_usable();
    return loader_->take_wait_seconds();
  }

 private:
  bool forked() const { return forked_; }

  // A Loader made before os.fork() has no worker threads in the child: waiting for its batches
  // would block forever. Refused by name instead (checked with the GIL held, before any wait).
  void check_usable() const {
    if (forked()) {
      throw Error(ErrorKind::kUnsupported, "",
                  "Loader: used in a process forked after it was made; its worker threads exist "
                  "only in the parent: create the Loader in the worker process (e.g. in "
                  "worker_init_fn)");
    }
    if (!loader_) throw Error(ErrorKind::kInvalidArgument, "", "Loader: used after close()");
  }

  // Marks the Loader in use for one call (taken and checked while the GIL is held). `rebuild`:
  // the call rebuilds the epoch's order (start, restore, resume), which epoch_position() reads.
  class Exclusive {
   public:
    explicit Exclusive(PyLoader* l, bool rebuild = false) : l_(l) {
      l_->check_usable();
      if (l_->busy_) {
        throw Error(ErrorKind::kInvalidArgument, "",
                    "Loader: used from two threads at once (iterate it from one thread)");
      }
      l_->busy_ = true;
      l_->rebuilding_ = rebuild;
    }
    ~Exclusive() { l_->busy_ = l_->rebuilding_ = false; }  // runs after the GIL is taken back

   private:
    PyLoader* l_;
  };

  bool busy_ = false;        // read and written only with the GIL held
  bool rebuilding_ = false;  // busy_ in start_epoch, restore or resume (the GIL held too)
  bool forked_ = false;      // set in a fork's child (os.register_at_fork, dscache/__init__.py)
  bool fields_handed_off_ = false;  // field values are views of pool_'s buffers
  std::vector<std::pair<py::str, py::dtype>> field_names_;  // see field_arrays
  std::shared_ptr<BufferPool> pool_;
  std::unique_ptr<Loader> loader_;
};
}  // namespace
}  // namespace dscache

PYBIND11_MODULE(_dscache, m) {
  using namespace dscache;
  m.doc() = "libcache's Cache, LazyCache and Loader (use the dscache package, not this module)";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      raise_python_error(e);
    }
  });

  bind_sources(m);  // SampleSource, Cache and LazyCache: the Loader takes a SampleSource

  py::class_<PyLoader>(m, "Loader")
      .def(py::init([](const py::object& source, uint32_t batch_size, bool drop_last,
                       const std::string& shuffle, uint64_t block, uint64_t window_blocks,
                       uint64_t block_bytes, uint64_t window_bytes, uint32_t rank,
                       uint32_t world_size, const std::string& rank_tail, uint32_t workers,
                       uint32_t prefetch, const std::string& crop, uint32_t height, uint32_t width,
                       double scale_min, double scale_max, double ratio_min, double ratio_max,
                       bool flip, std::optional<std::vector<std::string>> fields,
                       double min_box_visibility, uint32_t batch_stride, uint32_t batch_offset,
                       bool fresh_batches, const std::string& direct_read,
                       const std::optional<std::tuple<std::string, uint64_t, uint64_t, uint32_t>>&
                           shared_slots) {
             LoaderOptions o = make_loader_options(
                 batch_size, drop_last, shuffle, block, window_blocks, block_bytes, window_bytes,
                 rank, world_size, rank_tail, workers, prefetch, crop, height, width, scale_min,
                 scale_max, ratio_min, ratio_max, flip, fields, min_box_visibility, batch_stride,
                 batch_offset);
             o.hand_off_images = fresh_batches;  // Python's copy=True (PyLoader's allocator)
             o.direct_read = kDirectReadNames.parse(direct_read, "direct_read");
             std::shared_ptr<SharedSlots> slots;
             if (shared_slots) {
               const auto& [path, header, slot_bytes, count] = *shared_slots;
               slots = SharedSlots::map(path, header, slot_bytes, count);
             }
             std::shared_ptr<const Mixture> mixture = as_mixture(source);  // else a SampleSource
             return std::make_unique<PyLoader>(
                 mixture ? nullptr : source.cast<std::shared_ptr<SampleSource>>(),
                 std::move(mixture), o, std::move(slots));
           }),
           py::arg("source"), py::arg("batch_size"), py::arg("drop_last"), py::arg("shuffle"),
           py::arg("block"), py::arg("window_blocks"), py::arg("block_bytes"),
           py::arg("window_bytes"), py::arg("rank"), py::arg("world_size"), py::arg("rank_tail"),
           py::arg("workers"), py::arg("prefetch"), py::arg("crop"), py::arg("height"),
           py::arg("width"), py::arg("scale_min"), py::arg("scale_max"), py::arg("ratio_min"),
           py::arg("ratio_max"), py::arg("flip"), py::arg("fields") = py::none(),
           py::arg("min_box_visibility") = 0.0, py::arg("batch_stride") = 1,
           py::arg("batch_offset") = 0, py::arg("fresh_batches") = false,
           py::arg("direct_read") = "auto", py::arg("shared_slots") = py::none())
      .def("start_epoch", &PyLoader::start_epoch)
      .def("restore", &PyLoader::restore)
      .def("next", &PyLoader::next, py::arg("with_indices"))
      .def("drain", &PyLoader::drain)
      .def("position", &PyLoader::position)
      .def("sampler_options", &PyLoader::sampler_options)
      .def("cursor_at", &PyLoader::cursor_at, py::arg("sample"))
      .def("epoch_position", &PyLoader::epoch_position)
      .def("resume", &PyLoader::resume, py::arg("seed"), py::arg("epoch"), py::arg("sample"),
           py::arg("mix"), py::arg("new_weights"))
      .def("batches_per_epoch", &PyLoader::batches_per_epoch)
      .def("reads_direct", &PyLoader::reads_direct)
      .def("direct_read_reason", &PyLoader::direct_read_reason)
      .def("samples_per_epoch", &PyLoader::samples_per_epoch)
      .def("take_wait_seconds", &PyLoader::take_wait_seconds)
      .def("attach_shared_slots", &PyLoader::attach_shared_slots, py::arg("path"),
           py::arg("header_bytes"), py::arg("slot_bytes"), py::arg("slots"))
      .def("hand_slot", &PyLoader::hand_slot, py::arg("images"))
      .def("claim_slot", &PyLoader::claim_slot)
      .def("slot_counts", &PyLoader::slot_counts)
      .def("close", &PyLoader::close)
      .def("mark_forked", &PyLoader::mark_forked);

  bind_order(m);    // _order.cpp: epoch_order, epoch_sample, rank_batch_at
  bind_mixture(m);  // _mixture.cpp: Mixture, which the Loader takes like a SampleSource

  // dscache.Transform's construction: what libcache's validate() says of these options on
  // their own (the layout-dependent rules wait for the Loader, which knows the cache).
  m.def(
      "validate_transform",
      [](const std::string& crop, uint32_t height, uint32_t width, double scale_min,
         double scale_max, double ratio_min, double ratio_max, bool flip) {
        validate(transform_options(crop, height, width, scale_min, scale_max, ratio_min, ratio_max,
                                   flip),
                 Layout::kFixed);
      },
      py::arg("crop"), py::arg("height"), py::arg("width"), py::arg("scale_min"),
      py::arg("scale_max"), py::arg("ratio_min"), py::arg("ratio_max"), py::arg("flip"));

  // dscache.remote_options(): the process-wide options of remote caches (dscache/remote.h).
  m.def(
      "set_remote_options",
      [](const std::string& endpoint, const std::string& local_cache, uint64_t local_cache_size,
         unsigned requests_in_flight) {
        RemoteOptions o = remote_options();
        o.endpoint = endpoint;
        o.local_cache = local_cache;
        o.local_cache_size = local_cache_size;
        o.requests_in_flight = requests_in_flight;
        set_remote_options(o);
      },
      py::arg("endpoint"), py::arg("local_cache"), py::arg("local_cache_size"),
      py::arg("requests_in_flight"));

  bind_writer(m);
}
