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

Batch lifetime (the C++ contract): the images array of a batch is a view of one of the
Loader's ring buffers, valid until the next batch is taken. Its memory is never freed while
the array (or a tensor made from it with torch.from_numpy) is alive, so a kept view cannot
crash the process, but after the next batch the buffer is refilled with other samples. Keep a
batch beyond the next step with `images.copy()`, or pass copy=True. Labels, indices and
fields (masks, boxes, ...) are always copies.

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

Errors: dscache.Error and one subclass per kind (CorruptionError, NotFoundError,
InvalidArgumentError, IOError, UnsupportedError, BusyError) with .kind, .path and .reason.
"""

import atexit
import hashlib
import os
import sys
import warnings
import weakref

import numpy as np

from . import _dscache
from ._checks import _U32, _U64, _check_int, _invalid
from ._fields import Array, Boxes, Bytes, Field, Mask, Rows, Scalar, Text
from ._batch import Batch, detection_targets, per_sample
from ._batch import make_batch as _make_batch, to_torch as _batch_to_torch
from ._fields import from_bytes as _field_from_bytes, from_dict as _field_from_dict
from ._errors import (BusyError, CorruptionError, Error, InvalidArgumentError, IOError,  # noqa
                      NotFoundError, UnsupportedError)

__all__ = ["Cache", "LazyCache", "Loader", "Transform", "Error", "NotFoundError",
           "CorruptionError", "InvalidArgumentError", "IOError", "UnsupportedError",
           "BusyError", "epoch_order", "Writer", "build_order", "Field", "Mask", "Scalar",
           "Array", "Boxes", "Rows", "Text", "Bytes", "Batch", "per_sample",
           "detection_targets"]
__version__ = "0.1.0"

STATE_VERSION = 2  # 2: records the cache's identity ("data"); 1 is read, unchecked, with a warning

# Every live Loader, closed (workers stopped and joined) at interpreter exit: a worker still
# inside Python then (a LazyCache's decode function) would be killed by finalization.
_live_loaders = weakref.WeakSet()


def _mark_loaders_forked():
    """In a fork's child: every Loader made before the fork lost its worker threads (they stayed
    in the parent); using one raises UnsupportedError instead of waiting forever."""
    for loader in list(_live_loaders):
        impl = getattr(loader, "_impl", None)
        if impl is not None:
            impl.mark_forked()


os.register_at_fork(after_in_child=_mark_loaders_forked)


@atexit.register
def _close_live_loaders():
    for loader in list(_live_loaders):
        impl = getattr(loader, "_impl", None)
        if impl is not None:
            impl.close()


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
        return self._src.get(int(i))

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
        return self._src.label(int(i))

    def _identity(self):
        """What identifies these samples, for Loader.state_dict(): a resumed position means the
        same samples only on the same data."""
        raise NotImplementedError

    def sample_shape(self, i):
        """(H, W, C) of sample i (differs per sample in the ragged layout)."""
        return tuple(self._src.sample_shape(int(i)))

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
    """

    def __init__(self, path, memory="auto", memory_budget=0, hint="random",
                 verify_checksums=False):
        self._src = _dscache.Cache(str(path), memory, int(memory_budget), hint,
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
        [{file, first, count, bytes, fields {name: {values, offsets}}}], skipped, source {kind,
        root, entries}, tool_version, created_utc)."""
        return dict(self._manifest)

    count = property(lambda self: self._manifest["count"], doc="samples in the cache")
    classes = property(lambda self: list(self._manifest["classes"]), doc="class names")
    class_counts = property(lambda self: list(self._manifest["class_counts"]))
    storage = property(lambda self: self._manifest["storage"], doc='"npy" or "hdf5"')
    codec = property(lambda self: self._manifest["codec"], doc='"raw" or "jpeg"')
    channel_order = property(lambda self: self._manifest["channel_order"], doc='"RGB" or "L"')
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
        raw, rows = self._src.field(int(i), f)
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
    """

    def __init__(self, path, count, shape, labels, decode, source_digest=0, verify_hits=True):
        h, w, c = (int(x) for x in shape)
        labels = [int(x) for x in labels]
        self._src = _dscache.LazyCache(str(path), int(count), h, w, c, labels, decode,
                                       int(source_digest), bool(verify_hits))
        parts = [int(count), h, w, c, int(source_digest), labels]
        self._digest = hashlib.sha256(repr(parts).encode()).hexdigest()[:16]

    def _identity(self):
        return {"kind": "lazy", "count": len(self), "digest": self._digest}

    filled = property(lambda self: self._src.filled, doc="slots filled (all runs, processes)")
    hits = property(lambda self: self._src.hits, doc="samples served from the file here")
    misses = property(lambda self: self._src.misses, doc="samples decoded here")


class Transform:
    """Per-sample crop, resize and flip applied by the Loader's workers (dscache/transform.h),
    deterministic per (seed, epoch, sample).

    crop: "none" (samples as stored), "center" or "random_resized" (torchvision's
    RandomResizedCrop with scale and ratio); size: (height, width) of the output, or an int;
    flip: mirror horizontally with probability 1/2.
    """

    def __init__(self, crop="none", size=None, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3),
                 flip=False):
        if size is None:
            h = w = 0
        elif isinstance(size, (int, np.integer)):
            h = w = int(size)
        else:
            h, w = (int(x) for x in size)
        self.crop, self.height, self.width = crop, h, w
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))
        self.flip = bool(flip)

    def __repr__(self):
        return (f"dscache.Transform(crop={self.crop!r}, size=({self.height}, {self.width}), "
                f"scale={self.scale}, ratio={self.ratio}, flip={self.flip})")


def _distributed_defaults():
    """(rank, world_size) of an initialized torch.distributed group, else (0, 1). torch is not
    imported for this: a program that uses torch.distributed has imported it already."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:  # an odd torch build: behave as if not distributed
        pass
    return 0, 1


class Loader:
    """Shuffled, rank-sharded, prefetched batches from a Cache or LazyCache (libcache's Loader).

    Iterating yields (images, labels): images a (B, H, W, C) uint8 numpy array, labels (B,)
    int64; with return_indices=True also the (B,) uint64 sample indices. Over a cache with
    fields (format_version 3) it yields a dscache.Batch instead, a dict: "image", "label",
    "index" and the served fields -- fixed kinds stacked ("mask" (B, H, W), "count" (B,)),
    variable kinds flat with offsets ("boxes" (sum n, 4) and "boxes_offsets" (B + 1,)); see
    dscache.per_sample and dscache.detection_targets. Each iteration is one epoch of this rank:
    the epoch is set_epoch()'s value, or the one after the last complete pass (starting at 0).

    shuffle: True/"global" (a permutation of all samples), False/"none" (storage order) or
    "windowed" (for caches larger than memory: block, window_blocks, block_bytes,
    window_bytes as in dscache/sampler.h). seed: the shuffle seed. rank, world_size: this
    process's share (each rank takes every world_size-th sample of the epoch's order); default
    torch.distributed's rank and world size when it is initialized, else 0 and 1. rank_tail:
    "pad" (every rank gets as many samples, a few repeated) or "drop". drop_last: drop this
    rank's last short batch. workers: threads filling batches; prefetch: batches ready ahead.
    transform: a dscache.Transform, or None; masks and boxes get each sample's crop and flip
    with its image. copy: yield copies instead of views of the ring buffers (see the module
    docstring on batch lifetime; fields are always copies). fields: the field names to serve,
    in this order (None = all of the cache's, [] = none); fields not named are never read.
    min_box_visibility: a box is kept when the part of it inside the crop covers at least this
    share (0..1) of its whole area (0 = any part); rows_of rows follow their box.

    Iterate from one thread at a time: a second thread calling into the Loader while the first
    waits for a batch gets InvalidArgumentError. state_dict()/load_state_dict() save and restore
    the position between any two batches (torchdata StatefulDataLoader semantics).
    """

    def __init__(self, cache, batch_size=256, shuffle=True, seed=0, rank=None, world_size=None,
                 drop_last=False, workers=2, prefetch=4, transform=None, copy=False,
                 return_indices=False, rank_tail="pad", block=0, window_blocks=4, block_bytes=0,
                 window_bytes=0, fields=None, min_box_visibility=0.0):
        if not isinstance(cache, _Source):
            raise TypeError("dscache.Loader needs a dscache.Cache or dscache.LazyCache")
        if rank is None or world_size is None:
            d_rank, d_world = _distributed_defaults()
            rank = d_rank if rank is None else rank
            world_size = d_world if world_size is None else world_size
        if shuffle is True:
            shuffle = "global"
        elif shuffle is False or shuffle is None:
            shuffle = "none"
        t = transform if transform is not None else Transform()
        if not isinstance(t, Transform):
            raise TypeError("transform must be a dscache.Transform or None")
        for name, v in (("batch_size", batch_size), ("rank", rank), ("world_size", world_size),
                        ("workers", workers), ("prefetch", prefetch)):
            _check_int(name, v, 0, _U32)
        for name, v in (("seed", seed), ("block", block), ("window_blocks", window_blocks),
                        ("block_bytes", block_bytes), ("window_bytes", window_bytes)):
            _check_int(name, v, 0, _U64)
        for name, v in (("transform height", t.height), ("transform width", t.width)):
            _check_int(name, v, 0, _U32)
        self.cache = cache
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.rank, self.world_size = int(rank), int(world_size)
        self.drop_last = bool(drop_last)
        self.copy = bool(copy)
        self.return_indices = bool(return_indices)
        self.transform = t
        self.fields = self._select_fields(cache, fields)
        self._as_dict = bool(cache.fields)  # a cache with fields yields Batch dicts
        self._impl = _dscache.Loader(
            cache._src, self.batch_size, self.drop_last, shuffle, int(block), int(window_blocks),
            int(block_bytes), int(window_bytes), self.rank, self.world_size, rank_tail,
            int(workers), int(prefetch), t.crop, t.height, t.width, t.scale[0], t.scale[1],
            t.ratio[0], t.ratio[1], t.flip, None if fields is None else list(fields),
            float(min_box_visibility))
        self._epoch = 0          # the epoch the next iter() runs (or the one running)
        self._active = False     # an epoch was started and not finished
        self._pending = None     # a position from load_state_dict() for the next iter()
        self._generation = 0     # bumped on every iter(): an abandoned iterator stops
        _live_loaders.add(self)

    @staticmethod
    def _select_fields(cache, names):
        """{name: spec} of the fields served, in order (libcache checks unknown names)."""
        specs = {f.name: f for f in cache.fields}
        if names is None:
            names = list(specs)
        elif isinstance(names, (str, bytes)):
            raise TypeError(f"fields must be a list of field names, not a {type(names).__name__} "
                            f"(fields=[{names!r}])")
        names = list(names)
        for n in names:
            if not isinstance(n, str):
                raise TypeError(f"fields: a field name must be a str, got {n!r}")
        served = {n: specs[n] for n in names if n in specs}
        keys = ["image", "label", "index"]
        for n, f in served.items():
            keys += [n, n + "_offsets"] if f.variable else [n]
        for k in keys:
            if keys.count(k) > 1:
                raise _invalid(f"fields: a batch would hold two arrays named '{k}' (a field's "
                               f"name and another's offsets): select one with fields=[...]")
        return served

    # ---- epochs -------------------------------------------------------------------------

    def set_epoch(self, epoch):
        """The epoch the next iteration runs (DistributedSampler.set_epoch's role). Calling it
        is optional: each complete pass advances the epoch by one."""
        self._epoch = _check_int("epoch", epoch, 0, _U64)
        self._pending = None
        self._active = False

    @property
    def epoch(self):
        return self._epoch

    def __len__(self):
        """Batches per epoch for this rank."""
        return self._impl.batches_per_epoch()

    @property
    def samples_per_epoch(self):
        return self._impl.samples_per_epoch()

    def __iter__(self):
        # The C++ call first: if it fails (e.g. another thread is iterating), nothing changed.
        if self._pending is not None:
            seed, epoch, cursor = self._pending
            self._impl.restore(seed, epoch, cursor)
            self._pending = None
            self.seed, self._epoch = seed, epoch
        else:
            self._impl.start_epoch(self.seed, self._epoch)
        self._generation += 1
        self._active = True
        return self._batches(self._generation)

    def _batches(self, gen):
        impl, copy, as_dict, specs = self._impl, self.copy, self._as_dict, self.fields
        with_idx = self.return_indices or as_dict
        while True:
            if gen != self._generation:
                return  # a newer iter() took over the Loader
            b = impl.next(with_idx)
            if b is None:
                break
            images, labels, indices, _, fields = b
            if copy:
                images = images.copy()
            if as_dict:
                yield _make_batch(images, labels, indices, fields, specs)
            else:
                yield (images, labels, indices) if with_idx else (images, labels)
        if gen == self._generation and self._active:
            self._active = False
            self._epoch += 1

    def torch(self, device=None, non_blocking=False):
        """The same batches as torch.Tensors: images (B, H, W, C) uint8 and labels int64 made
        with torch.from_numpy (sharing memory, same lifetime rule; indices as int64), moved to
        `device` when given. Over a cache with fields: the Batch dict with every array a tensor
        (fields shared with the batch's copies; a uint16 mask as int32 where torch has no
        uint16)."""
        import torch
        for b in self:
            if isinstance(b, Batch):
                yield _batch_to_torch(b, device, non_blocking)
                continue
            # torch has no uint64 before 2.3: indices (< 2**63) travel as int64
            out = tuple(torch.from_numpy(x.view(np.int64) if x.dtype == np.uint64 else x)
                        for x in b)
            if device is not None:
                out = tuple(x.to(device, non_blocking=non_blocking) for x in out)
            yield out

    def wait_seconds(self):
        """Seconds spent waiting for batches since the last call (data-loading stall time)."""
        return self._impl.take_wait_seconds()

    # ---- resumable state ----------------------------------------------------------------

    def state_dict(self):
        """The position after the last batch yielded: resuming from it (load_state_dict, then
        iterate) yields exactly the batches an uninterrupted run would have yielded next. Taken
        between epochs (or after an epoch's last batch) it resumes at the next epoch. Plain
        ints and strings: picklable, JSON-able, fits in a torch checkpoint."""
        if self._pending is not None:
            seed, epoch, cursor = self._pending
        elif self._active:
            seed, epoch, cursor = self._impl.position()
        else:
            seed, epoch, cursor = self.seed, self._epoch, 0
        if cursor >= len(self) and len(self) > 0:
            epoch, cursor = epoch + 1, 0
        so = self._impl.sampler_options()
        return {"version": STATE_VERSION, "seed": int(seed), "epoch": int(epoch),
                "cursor": int(cursor), "batch_size": self.batch_size, "drop_last": self.drop_last,
                "rank": self.rank, "world_size": self.world_size,
                "batches_per_epoch": len(self), "sampler": so, "data": self.cache._identity()}

    def load_state_dict(self, state):
        """Continue from state_dict()'s position at the next iteration. Refuses (dscache.
        InvalidArgumentError) a state saved on another cache (its sample count or contents
        differ), with another batch size, rank, world size or shuffle geometry, or with a seed or
        epoch outside 0..2**64-1: its cursor would mean other samples."""
        version = state.get("version", 0)
        if version not in (1, STATE_VERSION):
            raise _invalid(f"state_dict: version {version!r} is not {STATE_VERSION}")
        if version == 1:
            warnings.warn("dscache: a version 1 state_dict does not record its cache; it is "
                          "resumed without checking that the cache is the same", stacklevel=2)
        else:
            theirs, mine_id = state.get("data") or {}, self.cache._identity()
            if theirs.get("count") != mine_id["count"]:
                raise _invalid(f"state_dict: saved on a cache of {theirs.get('count')!r} samples, "
                               f"this loader's cache has {mine_id['count']}")
            if theirs.get("kind") != mine_id["kind"] or theirs.get("digest") != mine_id["digest"]:
                raise _invalid(f"state_dict: saved on another cache (same {mine_id['count']} "
                               f"samples, content digest {theirs.get('digest')!r}, this one "
                               f"{mine_id['digest']!r}): its positions would mean other samples")
        seed = _check_int("state_dict seed", state.get("seed"), 0, _U64)
        epoch = _check_int("state_dict epoch", state.get("epoch"), 0, _U64)
        mine = self._impl.sampler_options()
        checks = [("batch_size", self.batch_size), ("drop_last", self.drop_last),
                  ("rank", self.rank), ("world_size", self.world_size)]
        for key, val in checks:
            if state.get(key) != val:
                raise InvalidArgumentError(
                    f"InvalidArgument: state_dict: {key} was {state.get(key)!r}, this loader "
                    f"has {val!r}", "", f"{key} differs")
        theirs = state.get("sampler", {})
        for key in ("shuffle", "block", "window_blocks", "rank_tail"):
            if theirs.get(key) != mine.get(key):
                raise InvalidArgumentError(
                    f"InvalidArgument: state_dict: sampler {key} was {theirs.get(key)!r}, this "
                    f"loader has {mine.get(key)!r} (pass the same shuffle options)", "",
                    f"sampler {key} differs")
        cursor = _check_int("state_dict cursor", state.get("cursor"), 0, len(self))
        self.seed = seed
        self._epoch = epoch
        self._active = False
        self._pending = (self.seed, self._epoch, cursor)

    def __repr__(self):
        return (f"dscache.Loader(batch_size={self.batch_size}, seed={self.seed}, "
                f"rank={self.rank}/{self.world_size}, epoch={self._epoch}, "
                f"{len(self)} batches/epoch)")


def epoch_order(n, shuffle="global", seed=0, epoch=0, rank=0, world_size=1, rank_tail="pad",
                block=0, window_blocks=4):
    """The sample indices rank `rank` visits in epoch `epoch` (dscache/sampler.h epoch_order):
    what a Loader with these options yields, batch after batch."""
    if shuffle is True:
        shuffle = "global"
    elif shuffle is False or shuffle is None:
        shuffle = "none"
    return _dscache.epoch_order(int(n), shuffle, int(block), int(window_blocks), int(rank),
                                int(world_size), rank_tail, int(seed), int(epoch))


from ._writer import Writer, build_order  # noqa: E402 (after the names it uses)
