"""dscache: serve pre-decoded image caches to Python training loops from libcache's C++ Loader.

    import dscache
    cache = dscache.Cache("fm-train")                   # validates every file, maps the shards
    loader = dscache.Loader(cache, batch_size=256, shuffle=True, seed=42, workers=2)
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for images, labels in loader:                   # numpy: (B, H, W, C) uint8, (B,) int64
            ...

There is one implementation: batches come from the same C++ Loader `dscache-train` uses, with
the same order for the same (seed, epoch) and options. Worker threads fill batches without
the GIL; the iterating thread releases it while it waits.

Batch lifetime. By default (copy=True) a batch's images are memory the batch has to itself,
never refilled while any array or tensor refers to it: keep it, list(loader),
torch.from_numpy(images) -- all safe, like torch DataLoader's batches. No copy is made: the
Loader hands the buffer its workers filled over to the batch and takes another for its ring
(recycled once nothing refers to it; cost: docs/BENCHMARKS.md "Python batches: copy=True vs
copy=False"). Loader(copy=False) opts into the reused ring: images is then a view of one of the
Loader's ring buffers, valid until the next batch is taken. Its memory is never freed while the
array (or a tensor made from it with torch.from_numpy) is alive, so a kept view cannot crash
the process, but after the next batch the buffer is refilled with other samples: use each
batch before taking the next one (move it to the GPU, or copy it). Fields (masks, boxes, ...)
are handed over with the images by default, copies with copy=False; labels and indices are
always copies.

Processes. dscache.Cache pickles as its path and open options and reopens in the receiving
process (checking that the samples on disk are still the ones pickled), so it can go to
spawn/forkserver DataLoader workers or a multiprocessing pool; a LazyCache too when its decode
function pickles. A Loader does not pickle (TypeError): make one in the process that iterates.

Writing a cache from Python (a dataset no folder layout describes):

    with dscache.Writer("my-cache", shape=(64, 64), classes=["cat", "dog"]) as w:
        for image, label in samples:                    # (64, 64, 3) uint8 arrays, class index
            w.write(image, label)
    # leaving the block publishes "my-cache"; an exception leaves a resumable partial directory

Samples may carry named, typed fields (a mask, boxes, a caption...): Writer(..., fields={"mask":
dscache.Mask(), "boxes": dscache.Boxes()}), w.write(image, label, mask=m, boxes=b), then
Cache.fields and Cache.field(i, "boxes"). A Loader over such a cache yields a dict per batch
(dscache.Batch): batch["image"], batch["label"], batch["index"], fixed fields stacked
(batch["mask"] (B, H, W)), variable ones flat with offsets (batch["boxes"] (sum n, 4),
batch["boxes_offsets"] (B + 1,)); dscache.per_sample(batch, "boxes") and
dscache.detection_targets(batch) cut them per sample. Loader(fields=[...]) serves only those.

Several caches as one, each with its share of an epoch: dscache.Mixture([a, b], weights=[0.7,
0.3]) goes wherever a Cache goes (Loader, dscache.torch.CacheDataset); its batches carry
"source" beside "index" (docs/PYTHON.md "Mixing caches").

PyTorch mirrors of dscache-train's models (cnn, resnet18, unet-small), with its parameter names:
dscache.models (imports torch; `import dscache` does not).

torch.utils.data datasets for DataLoader(num_workers=N), Lightning and StatefulDataLoader:
dscache.torch.CacheDataset (batches; workers split each epoch, exact resume) and
dscache.torch.CacheMapDataset (samples) (imports torch; `import dscache` does not).

Errors: dscache.Error and one subclass per kind (CorruptionError, NotFoundError,
InvalidArgumentError, IOError, UnsupportedError, BusyError, RemoteError) with .kind, .path and .reason.
"""

import hashlib
import os
import pickle

import numpy as np

from . import _dscache
from ._checks import (_I64_MAX, _I64_MIN, _U32, _U64, _check_int, _check_ints, _check_path,
                      _check_str, _invalid, _sample_index)
from ._fields import Array, Boxes, Bytes, Field, Mask, Rows, Scalar, Text
from ._batch import Batch, detection_targets, per_sample
from ._batch import to_torch as _batch_to_torch  # noqa: F401 (tests use it)
from ._fields import from_bytes as _field_from_bytes, from_dict as _field_from_dict
from ._errors import (BusyError, CorruptionError, Error, InvalidArgumentError, IOError,  # noqa
                      NotFoundError, RemoteError, UnsupportedError)

__all__ = ["Cache", "LazyCache", "Loader", "Transform", "Error", "NotFoundError",
           "CorruptionError", "InvalidArgumentError", "IOError", "UnsupportedError",
           "BusyError", "RemoteError", "remote_options", "epoch_order", "Writer", "build_order", "Field", "Mask", "Scalar",
           "Array", "Boxes", "Rows", "Text", "Bytes", "Batch", "per_sample",
           "detection_targets", "Mixture", "MixtureSource"]
__version__ = "0.1.0"

STATE_VERSION = 3  # 3: adds "sample", the global cursor (elastic resume); 2 (records the cache's
# identity, "data") is converted from its own geometry; 1 is read, unchecked, with a warning

class _Source:
    """What Cache and LazyCache share: len, indexing, shape, labels."""

    _src = None

    def __len__(self):
        return len(self._src)

    def __getitem__(self, i):
        """(image, label): image is a (H, W, C) uint8 copy of the sample, read through the
        guard that turns a shard truncated under the reader into dscache.Error; a read-only
        view in place (keeping the cache open) only when the whole cache is in process memory
        (memory="in-process"), where no file can shrink under it."""
        if isinstance(i, slice) or not isinstance(i, (int, np.integer)):
            raise TypeError("dscache caches are indexed by one int")
        return self._src.get(_sample_index(i, len(self)))

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    @property
    def shape(self):
        """(H, W, C) of every sample (fixed layout); (0, 0, C) for the ragged layout."""
        return tuple(self._src.shape)

    @property
    def layout(self):
        """"fixed" or "ragged"."""
        return self._src.layout

    @property
    def dtype(self):
        return np.dtype(np.uint8)

    def label(self, i):
        return self._src.label(_sample_index(i, len(self)))

    def _identity(self):
        """What identifies these samples, for Loader.state_dict(): a resumed position means the
        same samples only on the same data."""
        raise NotImplementedError

    def sample_shape(self, i):
        """(H, W, C) of sample i (differs per sample in the ragged layout)."""
        return tuple(self._src.sample_shape(_sample_index(i, len(self))))

    @property
    def fields(self):
        """The samples' fields besides image and label (none here; see Cache.fields)."""
        return []


class Cache(_Source):
    """A built cache directory, validated and memory-mapped (libcache's Cache::open).

    memory: "auto" (default: mapped when it fits in available memory, else pread),
    "page-cache", "in-process" (copied into private memory up to memory_budget bytes, 0 = all)
    or "pread". hint: madvise hint, "random" (default), "sequential" or "willneed".
    verify_checksums: hash every file against the manifest at open.

    Thread-safe. Views it returns stay valid while they (or the Cache) are alive.

    Picklable (spawn/forkserver DataLoader workers, multiprocessing): it travels as its absolute
    path and the options above and is reopened in the receiving process, which checks that the
    cache there has the same count and content digest (else dscache.InvalidArgumentError): a
    cache rebuilt in between is an error, not other samples. memory="auto" is resolved again
    there; memory="in-process" copies the cache into each process that unpickles it.
    """

    def __init__(self, path, memory="auto", memory_budget=0, hint="random",
                 verify_checksums=False):
        path = _check_path("path", path)
        _check_str("memory", memory)
        memory_budget = _check_int("memory_budget", memory_budget, 0, _U64)
        _check_str("hint", hint)
        self._src = _dscache.Cache(path, memory, memory_budget, hint, bool(verify_checksums))
        # What reopens it in another process (pickle): the directory as opened here.
        where = str(path)
        if not where.lower().startswith(("s3://", "http://", "https://")):
            where = os.path.abspath(where)
        self._open_args = (where, memory, int(memory_budget), hint,
                           bool(verify_checksums))
        self._manifest = self._src.manifest
        m = self._manifest
        m["shape"] = [m["height"], m["width"], m["channels"]]
        self._fields = [_field_from_dict(d) for d in m["fields"]]
        self._field_at = {f.name: k for k, f in enumerate(self._fields)}

    @property
    def manifest(self):
        """The manifest's fields as a dict (format_version, layout, storage, codec, dtype,
        shape [H, W, C] (0, 0, C for ragged), height, width, channels, channel_order, count,
        classes, class_counts, fields [{name, kind, dtype, shape, rows_of, classes}], shards
        [{file, first, count, bytes, fields {name: {values, offsets}}}], skipped, alpha ("drop",
        "composite" or "keep": what the build did with sources' alpha), transparent (samples
        whose source had a transparent pixel; None when not counted), source {kind, root,
        entries}, tool_version, created_utc)."""
        return dict(self._manifest)

    count = property(lambda self: self._manifest["count"], doc="samples in the cache")
    classes = property(lambda self: list(self._manifest["classes"]), doc="class names")
    class_counts = property(lambda self: list(self._manifest["class_counts"]))
    storage = property(lambda self: self._manifest["storage"], doc='"npy" or "hdf5"')
    codec = property(lambda self: self._manifest["codec"], doc='"raw" or "jpeg"')
    channel_order = property(lambda self: self._manifest["channel_order"], doc='"RGB", "L" or "RGBA"')
    path = property(lambda self: self._src.dir, doc="the cache directory")
    memory_mode = property(lambda self: self._src.memory_mode,
                           doc='the mode in force: "page-cache", "in-process" or "pread"')
    stored_bytes = property(lambda self: self._src.stored_bytes)

    @property
    def fields(self):
        """The cache's fields (docs/FORMAT.md "Fields"), in field order: dscache.Mask, Scalar,
        Array, Boxes, Rows, Text or Bytes specs with .name, .kind, .dtype, .shape, .rows_of,
        .classes (and .to_dict()). Empty for a cache without fields."""
        return list(self._fields)

    def field(self, i, name):
        """Sample i's value of field `name` (or its index in .fields), always a fresh copy
        (field files stay mapped, and a view read outside libcache's guard could crash the
        interpreter if the file shrank): mask (H, W) -- the sample's own (h, w) in the ragged
        layout --; scalar a numpy scalar; array its shape; boxes (n, 4) float32; rows
        (n, *shape); text str; bytes bytes."""
        if isinstance(name, (int, np.integer)) and not isinstance(name, bool):
            f = int(name)
            if not 0 <= f < len(self._fields):
                raise IndexError(f"field index {f} out of range ({len(self._fields)} fields)")
        else:
            f = self._field_at.get(name)
            if f is None:
                self._src.field_index(str(name))  # raises InvalidArgumentError listing them
        i = _sample_index(i, len(self))
        raw, rows = self._src.field(i, f)
        h, w = (self.sample_shape(i)[:2] if self._fields[f].kind == "mask" else (0, 0))
        return _field_from_bytes(self._fields[f], raw, rows, h, w)

    def sample_fields(self, i):
        """{name: value} of every field of sample i (see field())."""
        return {f.name: self.field(i, k) for k, f in enumerate(self._fields)}

    @property
    def labels(self):
        """All labels as an int64 array."""
        return np.fromiter((self._src.label(i) for i in range(len(self))), dtype=np.int64,
                           count=len(self))

    def _identity(self):
        m = self._manifest
        parts = [m["count"], m["layout"], m["codec"], m["height"], m["width"], m["channels"],
                 m["labels_xxh64"], m["checksums_xxh64"], m["index_xxh64"], m["source"]["digest"],
                 [(s["first"], s["count"], s["bytes"], s["xxh64"]) for s in m["shards"]]]
        digest = hashlib.sha256(repr(parts).encode()).hexdigest()[:16]
        return {"kind": "cache", "count": int(m["count"]), "digest": digest}

    def __reduce__(self):
        return (_reopen, (Cache, self._open_args, self._identity()))

    def __repr__(self):
        return (f"dscache.Cache({self.path!r}: {self.count} samples of {self.shape}, "
                f"{self.layout}, {self.storage}, {self.codec})")


class LazyCache(_Source):
    """Decodes each sample on first use and serves it from a persistent cache file afterwards
    (libcache's LazyCache; created sparse at `path` when missing, shared by processes).

    decode(i) must return sample i as a uint8 array of shape (H, W, C) and be deterministic; it
    is called from the Loader's worker threads (holding the GIL for the call), so a Python
    decoder runs one at a time. labels: `count` ints. source_digest identifies the source and
    recipe: a file made for another digest is refused.

    Picklable when decode is (a module-level function or a picklable callable object, not a
    lambda or a local function): it is reopened from its path in the receiving process, which
    shares the file (and its filled slots) safely. Otherwise pickling raises TypeError saying so.
    """

    def __init__(self, path, count, shape, labels, decode, source_digest=0, verify_hits=True):
        path = _check_path("path", path)
        count = _check_int("count", count, 0, _U64)
        h, w, c = _check_ints("shape", shape, 0, _U32, (3,))
        labels = [_check_int(f"labels[{k}]", x, _I64_MIN, _I64_MAX) for k, x in enumerate(labels)]
        if not callable(decode):
            raise TypeError(f"decode: must be a callable decode(i) -> (H, W, C) uint8 array, "
                            f"got {decode!r}")
        source_digest = _check_int("source_digest", source_digest, 0, _U64)
        self._src = _dscache.LazyCache(path, count, h, w, c, labels, decode, source_digest,
                                       bool(verify_hits))
        parts = [int(count), h, w, c, int(source_digest), labels]
        self._digest = hashlib.sha256(repr(parts).encode()).hexdigest()[:16]
        self._decode = decode
        self._open_args = (os.path.abspath(str(path)), int(count), (h, w, c), labels, decode,
                           int(source_digest), bool(verify_hits))

    def __reduce__(self):
        try:
            pickle.dumps(self._decode, pickle.HIGHEST_PROTOCOL)
        except Exception as e:
            raise TypeError(
                f"dscache.LazyCache cannot be pickled: its decode function {self._decode!r} "
                f"cannot be ({type(e).__name__}: {e}); define it at module level (or as a "
                f"picklable callable object) so that another process can import it") from e
        return (_reopen, (LazyCache, self._open_args, self._identity()))

    def _identity(self):
        return {"kind": "lazy", "count": len(self), "digest": self._digest}

    filled = property(lambda self: self._src.filled, doc="slots filled (all runs, processes)")
    hits = property(lambda self: self._src.hits, doc="samples served from the file here")
    misses = property(lambda self: self._src.misses, doc="samples decoded here")


def _reopen(cls, args, identity):
    """Unpickles a Cache or LazyCache: opens it again from `args` and checks that it holds the
    samples that were pickled (count and content digest)."""
    source = cls(*args)
    mine = source._identity()
    if mine != identity:
        reason = (f"the {cls.__name__} pickled held {identity['count']} samples (digest "
                  f"{identity['digest']}), the one at this path now holds {mine['count']} "
                  f"(digest {mine['digest']}): it changed on disk since it was pickled")
        raise InvalidArgumentError(f"InvalidArgument: {args[0]}: {reason}", args[0], reason)
    return source


def remote_options(endpoint=None, local_cache=None, local_cache_size=None,
                   requests_in_flight=None):
    """Sets how this process reaches caches on object storage (s3://BUCKET/PREFIX,
    http(s)://HOST/PATH), as the commands' --s3-endpoint, --local-cache and --local-cache-size
    do; None leaves the environment's value in force (AWS_ENDPOINT_URL, DSCACHE_LOCAL_CACHE,
    DSCACHE_LOCAL_CACHE_SIZE; docs/OPERATIONS.md, "Caches on object storage"). Applies to caches
    opened afterwards, in this process and in DataLoader workers (the values are also set in
    os.environ, which spawned workers inherit).

    endpoint: "http://HOST:PORT" or "https://HOST"; local_cache: a directory; local_cache_size:
    bytes (int > 0); requests_in_flight: concurrent downloads (int > 0)."""
    if endpoint is not None:
        endpoint = _check_str("endpoint", endpoint)
        if not endpoint.startswith(("http://", "https://")):
            raise _invalid(f"endpoint {endpoint!r}: expected http://HOST[:PORT] or "
                           "https://HOST[:PORT]")
    local_cache = "" if local_cache is None else _check_path("local_cache", local_cache)
    size = 0 if local_cache_size is None else _check_int("local_cache_size", local_cache_size,
                                                         1, _U64)
    n = 0 if requests_in_flight is None else _check_int("requests_in_flight",
                                                        requests_in_flight, 1, 1024)
    _dscache.set_remote_options(endpoint or "", local_cache, size, n)
    # And in the environment, which spawned DataLoader workers (and any child) inherit.
    if endpoint:
        os.environ["AWS_ENDPOINT_URL"] = endpoint
    if local_cache:
        os.environ["DSCACHE_LOCAL_CACHE"] = local_cache
    if size:
        os.environ["DSCACHE_LOCAL_CACHE_SIZE"] = str(size)


def epoch_order(n, shuffle="global", seed=0, epoch=0, rank=0, world_size=1, rank_tail="pad",
                block=0, window_blocks=4):
    """The sample indices rank `rank` visits in epoch `epoch` (dscache/sampler.h epoch_order):
    what a Loader with these options yields, batch after batch."""
    if shuffle is True:
        shuffle = "global"
    elif shuffle is False or shuffle is None:
        shuffle = "none"
    _check_str("shuffle", shuffle)
    _check_str("rank_tail", rank_tail)
    u64 = [_check_int(k, v, 0, _U64) for k, v in (("n", n), ("block", block),
                                                   ("window_blocks", window_blocks),
                                                   ("seed", seed), ("epoch", epoch))]
    u32 = [_check_int(k, v, 0, _U32) for k, v in (("rank", rank), ("world_size", world_size))]
    return _dscache.epoch_order(u64[0], shuffle, u64[1], u64[2], u32[0], u32[1], rank_tail,
                                u64[3], u64[4])


from ._mixture import Mixture, MixtureSource  # noqa: E402 (after the names it uses)
from ._loader import Loader, Transform  # noqa: E402 (after the names it uses)
from ._writer import Writer, build_order  # noqa: E402
