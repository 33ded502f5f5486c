"""dscache.Loader and dscache.Transform: batches from a Cache, LazyCache or Mixture (libcache's
Loader), and the per-sample crop/flip its workers apply. Imported by dscache/__init__.py, whose
names (Cache, LazyCache, Mixture) it checks against."""
import atexit
import os
import sys
import warnings
import weakref

import numpy as np

from . import STATE_VERSION, _dscache, _elastic, _mixture, _Source
from ._batch import Batch, make_batch as _make_batch, to_torch as _batch_to_torch
from ._checks import (_U32, _U64, _check_float, _check_int, _check_ints, _check_str,
                      _invalid)
from ._errors import InvalidArgumentError

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


class Transform:
    """Per-sample crop, resize and flip applied by the Loader's workers (dscache/transform.h),
    deterministic per (seed, epoch, sample).

    crop: "none" (samples as stored), "center" or "random_resized" (torchvision's
    RandomResizedCrop with scale and ratio); size: (height, width) of the output, or an int;
    flip: mirror horizontally with probability 1/2.
    Checked when made (libcache's rules; InvalidArgumentError naming the value and the known
    crops); what depends on the cache (its layout, a "none" crop's size) is checked by the Loader.
    """

    def __init__(self, crop="none", size=None, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3),
                 flip=False):
        _check_str("Transform crop", crop)
        if size is None:
            h = w = 0
        elif isinstance(size, (int, np.integer)) and not isinstance(size, bool):
            h = w = _check_int("Transform size", size, 0, _U32)
        else:
            h, w = _check_ints("Transform size", size, 0, _U32, (2,))
        self.crop, self.height, self.width = crop, h, w
        self.scale = self._pair("scale", scale)
        self.ratio = self._pair("ratio", ratio)
        self.flip = bool(flip)
        # libcache's own checks of these options (an unknown crop names the known ones); those
        # that depend on the cache (its layout, a "none" crop's size) wait for the Loader.
        _dscache.validate_transform(crop, h, w, *self.scale, *self.ratio, self.flip)

    @staticmethod
    def _pair(name, v):
        if isinstance(v, (str, bytes)) or not hasattr(v, "__len__") or len(v) != 2:
            raise _invalid(f"Transform {name}: must be a (min, max) pair of numbers, got {v!r}")
        return tuple(_check_float(f"Transform {name}[{k}]", x) for k, x in enumerate(v))

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


def _check_options(**kw):
    """Loader's (and CacheDataset's) options among `kw` checked by name and range before the
    binding sees them, and returned normalized (other keys as given): shuffle as its name,
    transform a Transform (None: the identity), direct_read as libcache's name,
    min_box_visibility a float, the ints ints."""
    o = dict(kw)
    if "shuffle" in kw:
        shuffle = kw["shuffle"]
        o["shuffle"] = "global" if shuffle is True else "none" if shuffle in (False, None) \
            else _check_str("shuffle", shuffle)
    if "transform" in kw:
        t = kw["transform"] if kw["transform"] is not None else Transform()
        if not isinstance(t, Transform):
            raise TypeError("transform must be a dscache.Transform or None")
        for name, v in (("transform height", t.height), ("transform width", t.width)):
            _check_int(name, v, 0, _U32)  # attributes set after construction
        o["transform"] = t
    for names, hi in ((("batch_size", "rank", "world_size", "workers", "prefetch",
                        "batch_stride", "batch_offset"), _U32),
                      (("seed", "block", "window_blocks", "block_bytes", "window_bytes"), _U64)):
        for name in names:
            if name in kw:
                o[name] = _check_int(name, kw[name], 0, hi)
    if "rank_tail" in kw:
        _check_str("rank_tail", kw["rank_tail"])
    if "min_box_visibility" in kw:
        o["min_box_visibility"] = _check_float("min_box_visibility", kw["min_box_visibility"])
    if "direct_read" in kw:
        o["direct_read"] = _direct_read_name(kw["direct_read"])
    return o


def _direct_read_name(value):
    """Loader's direct_read= as libcache's name: "auto", True/"on", False/"off"; anything else
    is InvalidArgumentError (a ValueError) naming the keyword."""
    if isinstance(value, (bool, np.bool_)):
        return "on" if value else "off"
    if isinstance(value, str) and value in ("auto", "on", "off"):
        return value
    raise _invalid(f"direct_read: {value!r} is not one of \"auto\", True, False (or \"on\", "
                   f"\"off\")")


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
    workers=0 fills each batch in the calling thread when it is asked for (no threads, nothing
    prefetched: torch DataLoader's num_workers=0); the batches are the same for every workers.
    transform: a dscache.Transform, or None; masks and boxes get each sample's crop and flip
    with its image. copy: True (default) yields images whose memory the batch has to itself:
    never refilled while any array or tensor refers to it (keep them, list(loader): all safe);
    the workers fill a buffer that is handed over instead of copied, and recycled once nothing
    refers to it. False yields views of the Loader's ring of prefetch + 1 buffers, refilled
    with other samples once the next batch is taken (see the module docstring on batch
    lifetime; labels and indices are always copies, fields are with copy=False and otherwise
    handed over like the images). fields: the field names to serve,
    in this order (None = all of the cache's, [] = none); fields not named are never read.
    min_box_visibility: a box is kept when the part of it inside the crop covers at least this
    share (0..1) of its whole area (0 = any part); rows_of rows follow their box.
    batch_stride, batch_offset: serve only batches offset, offset + stride, ... of this rank's
    epoch (len() and state_dict()'s cursor count those); stride Loaders with offsets
    0..stride-1 serve the unstrided Loader's batches between them (dscache.torch's DataLoader
    workers).
    direct_read: "auto" (default), True or False (also "on", "off"): read a windowed epoch's
    windows with O_DIRECT into the Loader's own buffers instead of through the page cache
    (libcache's LoaderOptions::direct_read). It applies only with shuffle="windowed" over a
    Cache opened with memory="pread" (or "auto" on a cache larger than memory), the raw fixed
    layout and no crop; "auto" reads directly there when the cache's bytes exceed what this
    process's page cache can hold (the smaller of MemAvailable and the memory cgroup's limit
    minus its usage), so a cache that fits stays cached for the next epoch. reads_direct and
    direct_read_reason say what was chosen and why.

    Iterate from one thread at a time: a second thread calling into the Loader while the first
    waits for a batch gets InvalidArgumentError. state_dict()/load_state_dict() save and restore
    the position between any two batches (torchdata StatefulDataLoader semantics).
    """

    def __init__(self, cache, batch_size=256, shuffle=True, seed=0, rank=None, world_size=None,
                 drop_last=False, workers=2, prefetch=4, transform=None, copy=True,
                 return_indices=False, rank_tail="pad", block=0, window_blocks=4, block_bytes=0,
                 window_bytes=0, fields=None, min_box_visibility=0.0, batch_stride=1,
                 batch_offset=0, direct_read="auto", _slots=None):
        if not isinstance(cache, _Source):
            raise TypeError("dscache.Loader needs a dscache.Cache, LazyCache or Mixture")
        mixture = cache if isinstance(cache, _mixture.Mixture) else None
        if rank is None or world_size is None:
            d_rank, d_world = _distributed_defaults()
            rank = d_rank if rank is None else rank
            world_size = d_world if world_size is None else world_size
        o = _check_options(batch_size=batch_size, shuffle=shuffle, seed=seed, rank=rank,
                           world_size=world_size, workers=workers, prefetch=prefetch,
                           transform=transform, rank_tail=rank_tail, block=block,
                           window_blocks=window_blocks, block_bytes=block_bytes,
                           window_bytes=window_bytes, min_box_visibility=min_box_visibility,
                           batch_stride=batch_stride, batch_offset=batch_offset,
                           direct_read=direct_read)
        shuffle, t, direct_read = o["shuffle"], o["transform"], o["direct_read"]
        self.cache = cache
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.rank, self.world_size = int(rank), int(world_size)
        self.drop_last = bool(drop_last)
        self._copy = bool(copy)  # fixed: the C++ Loader is made for one or the other
        self.batch_stride, self.batch_offset = int(batch_stride), int(batch_offset)
        self.return_indices = bool(return_indices)
        self.transform = t
        self.fields, names = self._select_fields(cache, fields)
        self._as_dict = bool(cache.fields) or mixture is not None  # these yield Batch dicts
        self._mixture = mixture
        self._impl = _dscache.Loader(
            cache._src if mixture is None else mixture._mix, self.batch_size, self.drop_last, shuffle, int(block), int(window_blocks),
            int(block_bytes), int(window_bytes), self.rank, self.world_size, rank_tail,
            int(workers), int(prefetch), t.crop, t.height, t.width, t.scale[0], t.scale[1],
            t.ratio[0], t.ratio[1], t.flip, names,
            o["min_box_visibility"], self.batch_stride, self.batch_offset, self._copy,
            direct_read, None if _slots is None else  # dscache.torch's ring (_shm_ring.Ring)
            (_slots.name, _slots.header, _slots.slot_bytes, _slots.slots))
        self._epoch = 0          # the epoch the next iter() runs (or the one running)
        self._active = False     # an epoch was started and not finished
        self._pending = None     # a position from load_state_dict() for the next iter()
        self._generation = 0     # bumped on every iter(): an abandoned iterator stops
        # A mixture: the C++ Loader is already where the next iter() starts (a resume), it ran
        # an epoch, and its streams left the pure epochs' (_mixture.py, positions).
        self._positioned = self._ran = self._moved = False
        _live_loaders.add(self)

    copy = property(lambda self: self._copy,
                    doc="True: each batch's images its own memory; False: views of the ring")

    @property
    def reads_direct(self):
        """True while the epoch's windows are read with O_DIRECT (direct_read chose it and the
        file system accepted it); False before the first iteration."""
        return self._impl.reads_direct()

    @property
    def direct_read_reason(self):
        """One line: what direct_read chose and why, e.g. "auto: cache 1.1 GiB > 290 MiB
        available to this process's page cache (cgroup limit)"."""
        return self._impl.direct_read_reason()

    @staticmethod
    def _select_fields(cache, names):
        """({name: spec} of the fields served, in order; the names as given, for libcache, which
        refuses unknown and repeated ones; None: all). "image", "label" and "index", the arrays
        every batch holds, may be named too: they add nothing."""
        specs = {f.name: f for f in cache.fields}
        given = names
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
        keys = ["image", "label", "index"] + (["source"] if isinstance(
            cache, _mixture.Mixture) else [])
        for n, f in served.items():
            keys += [n, n + "_offsets"] if f.variable else [n]
        for k in keys:
            if keys.count(k) > 1:
                raise _invalid(f"fields: a batch would hold two arrays named '{k}' (a field's "
                               f"name and another's offsets): select one with fields=[...]")
        return served, (None if given is None else names)

    # ---- epochs -------------------------------------------------------------------------

    def set_epoch(self, epoch):
        """The epoch the next iteration runs (DistributedSampler.set_epoch's role). Calling it
        is optional: each complete pass advances the epoch by one."""
        self._epoch = _check_int("epoch", epoch, 0, _U64)
        self._pending = None
        self._active = self._positioned = False

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
        if self._positioned:
            self._positioned = False
        elif self._pending is not None:
            seed, epoch, cursor = self._pending
            self._impl.restore(seed, epoch, cursor)
            self._pending = None
            self.seed, self._epoch = seed, epoch
        else:
            self._impl.start_epoch(self.seed, self._epoch)
        self._generation += 1
        self._active = self._ran = True
        return self._batches(self._generation)

    def _batches(self, gen):
        impl, as_dict, specs = self._impl, self._as_dict, self.fields
        with_idx = self.return_indices or as_dict
        while True:
            if gen != self._generation:
                return  # a newer iter() took over the Loader
            b = impl.next(with_idx)
            if b is None:
                break
            images, labels, indices, _, fields = b
            if as_dict:
                yield _make_batch(images, labels, indices, fields, specs)
            else:
                yield (images, labels, indices) if with_idx else (images, labels)
        if gen == self._generation and self._active:
            self._active = False
            self._epoch += 1

    def torch(self, device=None, non_blocking=False, pin_memory=False):
        """The same batches as torch.Tensors: images (B, H, W, C) uint8 and labels int64 made
        with torch.from_numpy (sharing memory with the numpy batch: fresh with copy=True, the
        ring buffer's lifetime with copy=False; indices as int64), moved to `device` when given.
        Over a cache with fields: the Batch dict with every array a tensor (a uint16 mask as
        int32 where torch has no uint16).

        pin_memory: yield every tensor in page-locked memory (Tensor.pin_memory()), so that
        .to("cuda", non_blocking=True) copies asynchronously (a copy into pinned memory per
        tensor, as DataLoader's pin_memory makes). As torch 1.13's DataLoader does, it applies
        only when torch.cuda.is_available(); on a torch without an accelerator it is ignored
        (tensors as with pin_memory=False, no warning)."""
        import torch
        pin = bool(pin_memory) and torch.cuda.is_available()
        for b in self:
            if isinstance(b, Batch):
                yield _batch_to_torch(b, device, non_blocking, pin)
                continue
            # torch has no uint64 before 2.3: indices (< 2**63) travel as int64
            out = tuple(torch.from_numpy(x.view(np.int64) if x.dtype == np.uint64 else x)
                        for x in b)
            if pin:
                out = tuple(x.pin_memory() for x in out)
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
        state = {"version": STATE_VERSION, "seed": int(seed), "epoch": int(epoch),
                 "cursor": int(cursor), "batch_size": self.batch_size,
                 "drop_last": self.drop_last, "rank": self.rank, "world_size": self.world_size,
                 "batch_stride": self.batch_stride, "batch_offset": self.batch_offset,
                 "batches_per_epoch": len(self), "sampler": so, "data": self.cache._identity()}
        if self._mixture is not None:  # "sample" and "mix" from the C++ Loader's position
            return _mixture.loader_state(self, state)
        return _elastic.with_sample(state, so["rank_tail"])

    def load_state_dict(self, state, allow_new_weights=False):
        """Continue from state_dict()'s position at the next iteration. A state saved with
        another world size, rank or batch size (version 2 or 3) continues at its global cursor
        (the epoch's samples all ranks had taken): this loader serves the rest of that epoch's
        global order, cut for its own geometry. Refuses (dscache.InvalidArgumentError) a state
        saved on another cache (its sample count or contents differ), with another drop_last,
        batch stride/offset or shuffle geometry, a global cursor that is not a multiple of
        batch_size x world_size, or a seed or epoch outside 0..2**64-1: its position would mean
        other samples.

        Over a Mixture the state carries its position in the mixed epoch ("mix"): it resumes
        only under the same shares (weights or repeat, epoch_samples, batching), else
        InvalidArgumentError naming both, unless allow_new_weights=True: the samples already
        taken stand and the rest of that epoch is served under this loader's shares, each
        source's stream continuing where it was (docs/PYTHON.md "Mixing caches")."""
        version = state.get("version", 0)
        if version not in (1, 2, STATE_VERSION):
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
        checks = [("drop_last", self.drop_last), ("batch_stride", self.batch_stride),
                  ("batch_offset", self.batch_offset)]
        if version == 1:  # no identity, no elastic resume: the position as saved
            checks += [("batch_size", self.batch_size), ("rank", self.rank),
                       ("world_size", self.world_size)]
        unstrided = {"batch_stride": 1, "batch_offset": 0}  # states saved before strides
        for key, val in checks:
            if state.get(key, unstrided.get(key)) != val:
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
        if self._mixture is not None:
            if state.get("sample") is None or "mix" not in state:
                # Without them only the pure order at its cursor could be served: wrong after
                # a weight change, and unchecked against the shares.
                raise _invalid("state_dict: no 'sample' and 'mix' (a mixture's position): "
                               "saved by a Loader over one cache, or edited; a Loader over a "
                               "Mixture resumes only a mixture's state_dict()")
            return _mixture.resume_loader(self, state, seed, epoch, allow_new_weights)
        if "mix" in state:
            raise _invalid("state_dict: 'mix' is a mixture's position (saved by a Loader over a "
                           "Mixture); this Loader serves one cache")
        if version == 1:
            cursor = _check_int("state_dict cursor", state.get("cursor"), 0, len(self))
        else:
            sample = _elastic.state_sample(state, _mixture.epoch_samples(self.cache),
                                           theirs.get("rank_tail"))
            cursor = self._impl.cursor_at(sample)
        self._at_cursor(seed, epoch, cursor)

    def _at_cursor(self, seed, epoch, cursor):
        """The next iteration serves from this Loader's batch `cursor` of `epoch` (the pure order
        over a Mixture): load_state_dict()'s end, and what CacheDataset's workers, whose epochs
        are pure, ask for directly."""
        self.seed, self._epoch = seed, epoch
        self._active = self._positioned = False
        self._pending = (seed, epoch, cursor)

    def __reduce_ex__(self, protocol):
        raise TypeError(
            "a dscache.Loader cannot be pickled: it owns worker threads, ring buffers and a "
            "position inside an epoch, none of which a copy in another process could share. "
            "Pickle its cache instead (dscache.Cache is picklable) and create the Loader in the "
            "child process (its rank then comes from that process's torch.distributed); carry a "
            "position with state_dict()/load_state_dict()")

    def __repr__(self):
        return (f"dscache.Loader(batch_size={self.batch_size}, seed={self.seed}, "
                f"rank={self.rank}/{self.world_size}, epoch={self._epoch}, "
                f"{len(self)} batches/epoch)")
