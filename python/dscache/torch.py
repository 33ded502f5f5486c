"""dscache.torch: a cache as a torch.utils.data dataset, for DataLoader(num_workers=N) and
everything built on it (Lightning, torchdata's StatefulDataLoader).

    from torch.utils.data import DataLoader
    from dscache.torch import CacheDataset
    ds = CacheDataset("fm-train", batch_size=256, shuffle=True, seed=0)
    dl = DataLoader(ds, batch_size=None, num_workers=2, pin_memory=True,
                    persistent_workers=True)
    for epoch in range(epochs):
        ds.set_epoch(epoch)                  # optional: each complete pass advances it
        for step, (images, labels) in enumerate(dl):
            ...
            state = ds.state_dict(batches=step + 1)   # exact position, for a checkpoint

CacheDataset yields whole batches (the DataLoader must not batch again: batch_size=None), the
same tensors dscache.Loader(...).torch() yields (copies, never views of ring buffers). Worker w
of W serves batches w, w + W, w + 2W, ... of the rank's epoch, so the DataLoader, which takes
one batch from each worker in turn, yields exactly the single Loader's batches in its order.
Each process opens its own Cache and Loader on its first iteration: the dataset holds only the
path and options (picklable; fork and spawn both work).

CacheMapDataset is the map-style form: dataset[i] is sample i, for samplers and default
collation.

This module imports torch; `import dscache` does not import it.
"""
import os
import warnings

import numpy as np
import torch
import torch.utils.data

from . import Cache, Error, _mixture
from ._checks import _U32, _U64, _check_int, _invalid
from ._batch import Batch, to_torch as _batch_to_torch
from ._loader import Loader, _check_options, _distributed_defaults
from . import _elastic, _shm_ring

__all__ = ["CacheDataset", "CacheMapDataset"]

STATE_VERSION = 2  # 2: a rank's state adds "sample", its global cursor (elastic resume)
_MAX_WORKERS = 256  # DataLoader workers per dataset (shared slots below)

# The int64 slots CacheDataset shares with its DataLoader workers (a tensor in shared memory:
# a persistent worker's copy of the dataset never sees later attribute changes).
_VERSION = 0      # bumped by every set_epoch() / load_state_dict() in the main process
_BASE_EPOCH = 1   # the epoch the next pass runs after such a call ...
_BASE_CURSOR = 2  # ... and the batch of the rank's epoch it starts at
_PASS_EPOCH = 3   # the pass a worker started last: its epoch,
_PASS_CURSOR = 4  # the batch it started at,
_PASS_VERSION = 5  # and the _VERSION it was planned under (-1: none yet)
_SEED = 6         # the shuffle seed (uint64 bits)
_SLOTS = 8        # then per worker: [version seen, next pass's epoch, next pass's cursor]
_SLOT_SIZE = 3


def _to_i64(u):
    return u - (1 << 64) if u >= (1 << 63) else u


def _to_u64(i):
    return i + (1 << 64) if i < 0 else i


def _shared_copy(a):
    """A tensor in shared memory holding a copy of numpy array `a`. A DataLoader worker sends a
    tensor to the main process by moving its storage into shared memory, a copy per batch unless
    it is there already: the image is copied out of the Loader's ring buffer straight there."""
    storage = torch.ByteStorage._new_shared(a.nbytes)
    t = torch.tensor([], dtype=torch.uint8).set_(storage).view(a.shape)
    np.copyto(t.numpy(), a)
    return t


# Slots of a worker's ring whose Loader fills them itself: its prefetch + 1 buffers, the batch
# being handed off (its successor's buffer is taken first), the DataLoader's prefetch_factor
# (2) batches in flight and one the user holds. Fewer free: a batch goes through a copy.
_SLOTS_OVER_PREFETCH = 4


def _slots_loader(cache, ring, **kwargs):
    """A Loader (copy=True) that fills its batches straight into ring's slots, its first
    prefetch + 1 buffers included (the slots are attached before it allocates them); None when
    the mapping is refused (then the batches are copied in)."""
    try:
        return Loader(cache, _slots=ring, **kwargs)
    except Error as e:  # the ring's mapping: the copy still works
        warnings.warn(f"dscache.torch: the Loader cannot fill the shared-memory ring ({e}); "
                      f"batches are copied into it", RuntimeWarning)
        return None


def _worker_batches(loader, ring, in_place=False):
    """loader's batches as Loader.torch() gives them (copy=True), the images sent through
    `ring` (a Ring, or None) or in a tensor already in shared memory. in_place: loader fills
    ring's slots itself (_slots_loader): a batch in a slot is sent as it is; one that is not (no
    slot was free when its buffer was allocated) is copied into a free slot, else sent torch's
    way."""
    impl = loader._impl

    def send(images):
        if ring is None:
            return _shared_copy(images)
        if in_place:
            k = impl.hand_slot(images)
            if k >= 0:
                return ring.handle(k, images)
            k = impl.claim_slot()
            return ring.put(images, slot=k) if k >= 0 else _shared_copy(images)
        handle = ring.put(images)
        return handle if handle is not None else _shared_copy(images)

    for b in loader:
        if isinstance(b, Batch):
            out = _batch_to_torch(b)  # image: a view of the ring buffer, replaced at once
            out["image"] = send(b["image"])
            yield out
        else:
            images, labels = b
            yield send(images), torch.from_numpy(labels)


def _worker():
    """(worker id, number of workers) of this process: (0, 1) outside DataLoader workers."""
    info = torch.utils.data.get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


class CacheDataset(torch.utils.data.IterableDataset):
    """A cache's or a dscache.Mixture's batches for DataLoader(ds, batch_size=None, num_workers=W).

    Options are dscache.Loader's: batch_size, shuffle (True/"global", False/"none",
    "windowed"), seed, drop_last, transform (a dscache.Transform), fields, rank and
    world_size (default torch.distributed's when it is initialized here, at construction, else 0
    and 1; the rank split is the Loader's own), rank_tail, prefetch, and threads (the Loader's
    worker threads in each DataLoader process: with W DataLoader workers keep threads * W near
    the cores). memory: how each process opens the Cache (dscache.Cache's memory option).
    direct_read: "auto" (default), True or False, dscache.Loader's: with shuffle="windowed" over
    a cache larger than memory, read each window with O_DIRECT instead of through the page cache.

    Each item is one batch: (images (B, H, W, C) uint8, labels (B,) int64) tensors, or a
    dscache.Batch dict of tensors over a cache with fields.

    Epochs: each pass runs the epoch after the last complete pass of the same worker (starting
    at 0), or set_epoch()'s value; set_epoch() and load_state_dict() reach persistent workers
    too (through shared memory), and must be called between epochs (before iter(dataloader)). A
    pass cut short (a break) counts as not run: the next one runs the same epoch again unless
    set_epoch() or load_state_dict() says otherwise.

    shared_ring: DataLoader workers hand each batch's images to the main process through a few
    reusable shared-memory slots (dscache/_shm_ring.py) instead of a new shared-memory segment
    per tensor, several times faster; the main process gets ordinary tensors. Each worker's
    Loader fills its batches straight into those slots (prefetch + 5 of them a worker, in
    /dev/shm), so a batch reaches the main process without a copy; when none is free (the user
    holds many batches) it is copied, never waited for. Set it False when
    the DataLoader has a collate_fn of its own (it would see placeholders in the workers).

    Position: state_dict(batches=n) after the DataLoader yielded n batches of its current
    iteration; load_state_dict(state) before the next iter(dataloader) resumes exactly there
    (the rest of that epoch, then the next ones). Inside a worker (torchdata's
    StatefulDataLoader calls them there) state_dict() and load_state_dict() save and restore that
    worker's own position.
    """

    def __init__(self, path, batch_size=256, shuffle=True, seed=0, drop_last=False,
                 transform=None, fields=None, threads=2, prefetch=4, rank=None, world_size=None,
                 rank_tail="pad", memory="auto", block=0, window_blocks=4, block_bytes=0,
                 window_bytes=0, min_box_visibility=0.0, shared_ring=True, direct_read="auto"):
        super().__init__()
        if rank is None or world_size is None:
            d_rank, d_world = _distributed_defaults()
            rank = d_rank if rank is None else rank
            world_size = d_world if world_size is None else world_size
        if isinstance(fields, (str, bytes)):
            raise TypeError(f"fields must be a list of field names, not a "
                            f"{type(fields).__name__} (fields=[{fields!r}])")
        # The Loader's options, checked here: a bad one fails now, not in every worker.
        self._loader_kwargs = o = _check_options(
            batch_size=batch_size, shuffle=shuffle, rank=rank, world_size=world_size,
            drop_last=bool(drop_last), workers=_check_int("threads", threads, 0, _U32),
            prefetch=prefetch, transform=transform, copy=True, rank_tail=rank_tail, block=block,
            window_blocks=window_blocks, block_bytes=block_bytes, window_bytes=window_bytes,
            direct_read=direct_read, fields=None if fields is None else list(fields),
            min_box_visibility=min_box_visibility)
        self.path = path if isinstance(path, _mixture.Mixture) else os.fspath(path)
        self.batch_size, self.drop_last = o["batch_size"], o["drop_last"]
        self.rank, self.world_size = o["rank"], o["world_size"]
        self.rank_tail = rank_tail
        self.memory = memory
        self.shared_ring = bool(shared_ring)
        self._ring = None  # (pid, Ring or None): this DataLoader worker's handoff ring
        self._shared = torch.full((_SLOTS + _SLOT_SIZE * _MAX_WORKERS,), -1, dtype=torch.int64)
        self._shared[_VERSION] = 0
        self._shared[_BASE_EPOCH] = 0
        self._shared[_BASE_CURSOR] = 0
        self._shared[_SEED] = _to_i64(_check_int("seed", seed, 0, _U64))
        self._shared.share_memory_()
        self._proc = None       # (pid, Cache, Loader or None, (stride, offset)): this process's
        self._override = None  # a worker's own state to resume (StatefulDataLoader)
        # The pass running in this process: [seed, epoch, its first batch of the rank's epoch,
        # this worker's batches of it served (restored ones included), W, w, its Loader's len].
        self._pass = None
        len(self)  # opens the cache here: a bad path or option fails now, not in a worker
        _shm_ring.reap()  # rings of an earlier DataLoader's workers that were killed

    # ---- per-process Cache and Loader -----------------------------------------------------

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_proc"] = None  # each process opens its own
        state["_ring"] = None
        state["_pass"] = None
        return state

    def _cache(self):
        if self._proc is None or self._proc[0] != os.getpid():
            self._proc = (os.getpid(), _mixture.open_source(self.path, self.memory), None, None)
        return self._proc[1]

    def _loader(self, stride, offset):
        cache = self._cache()
        pid, _, loader, geometry = self._proc
        if loader is None or geometry != (stride, offset):
            if loader is not None:
                loader._impl.close()
            # In a DataLoader worker with the shared ring, the Loader hands each batch's buffer
            # off (copy=True), a slot of the ring it fills in place; without the ring
            # _worker_batches copies each image once, into shared memory, and the Loader's
            # views suffice.
            in_worker = torch.utils.data.get_worker_info() is not None
            kwargs = dict(self._loader_kwargs, copy=self.shared_ring or not in_worker, seed=0,
                          batch_stride=stride, batch_offset=offset)
            ring = self._worker_ring(cache) if in_worker else None
            loader = None if ring is None else _slots_loader(cache, ring, **kwargs)
            attached = loader is not None
            if loader is None:
                loader = Loader(cache, **kwargs)
            loader._slots_attached = attached
            self._proc = (pid, cache, loader, (stride, offset))
        return loader

    def _worker_ring(self, cache):
        """This worker's Ring (made on first use), or None (shared_ring off, no room). Slots
        sized for a full batch of images."""
        if not self.shared_ring:
            return None
        if self._ring is None or self._ring[0] != os.getpid():
            h, w, c = cache.shape
            t = self._loader_kwargs["transform"]
            if t is not None and t.height:
                h, w = t.height, t.width
            slots = self._loader_kwargs["prefetch"] + 1 + _SLOTS_OVER_PREFETCH
            try:
                ring = _shm_ring.Ring(max(1, self.batch_size * h * w * c), slots)
            except OSError as e:  # no room in /dev/shm: torch's own handoff, which needs less
                warnings.warn(f"dscache.torch: no shared-memory ring for this worker ({e}); "
                              f"batches go through torch's handoff", RuntimeWarning)
                ring = None
            self._ring = (os.getpid(), ring)
        return self._ring[1]

    def __len__(self):
        """Batches per epoch of this rank (all DataLoader workers together)."""
        n = _mixture.epoch_samples(self._cache())
        world = self.world_size
        if world < 1 or self.rank >= world:
            raise _invalid(f"rank {self.rank} must be < world_size {world}")
        per_rank = -(-n // world) if self.rank_tail == "pad" else n // world
        bs = self.batch_size
        if bs < 1:
            raise _invalid("batch_size must be >= 1")
        return per_rank // bs if self.drop_last else -(-per_rank // bs)

    # ---- epochs -------------------------------------------------------------------------

    def set_epoch(self, epoch):
        """The epoch the next pass runs, in every worker (DistributedSampler.set_epoch's role).
        Call it between epochs, before iter(dataloader)."""
        self._plan(_check_int("epoch", epoch, 0, _U64), 0)

    @property
    def epoch(self):
        """The epoch set_epoch() or load_state_dict() set last (0 before either)."""
        return int(self._shared[_BASE_EPOCH])

    @property
    def seed(self):
        return _to_u64(int(self._shared[_SEED]))

    def _plan(self, epoch, cursor, seed=None):
        sh = self._shared
        if seed is not None:
            sh[_SEED] = _to_i64(seed)
        sh[_BASE_EPOCH] = _to_i64(epoch)
        sh[_BASE_CURSOR] = cursor
        sh[_VERSION] += 1  # last: a worker sees the new plan whole
        self._override = None

    def __iter__(self):
        w, workers = _worker()
        if torch.utils.data.get_worker_info() is None:
            _shm_ring.reap()
        if workers > _MAX_WORKERS:
            raise _invalid(f"CacheDataset serves at most {_MAX_WORKERS} DataLoader workers, "
                           f"got num_workers={workers}")
        sh = self._shared
        version = int(sh[_VERSION])
        slot = _SLOTS + _SLOT_SIZE * w
        seed = self.seed
        if self._override is not None:
            seed, epoch, start, skip = self._override
            self._override = None
        else:
            if int(sh[slot]) != version:  # a new plan since this worker's last pass
                sh[slot + 1] = sh[_BASE_EPOCH]
                sh[slot + 2] = sh[_BASE_CURSOR]
                sh[slot] = version
            epoch, start, skip = _to_u64(int(sh[slot + 1])), int(sh[slot + 2]), 0
        sh[_PASS_EPOCH] = _to_i64(epoch)
        sh[_PASS_CURSOR] = start
        sh[_PASS_VERSION] = version
        # Worker w serves batches start + w, start + w + W, ...: the DataLoader asks worker 0
        # first, whose batch must be `start` itself.
        offset = (start + w) % workers
        loader = self._loader(workers, offset)
        first = min((start + w) // workers + skip, len(loader))
        loader._at_cursor(seed, epoch, first)
        self._pass = [seed, epoch, start, first - (start + w) // workers, workers, w, len(loader)]
        in_worker = torch.utils.data.get_worker_info() is not None
        batches = _worker_batches(loader, self._worker_ring(loader.cache),
                                  loader._slots_attached) if in_worker else loader.torch()
        for batch in batches:
            self._pass[3] += 1
            yield batch
        # A complete pass: this worker's next one runs the next epoch (unless a plan comes).
        self._pass = None
        sh[slot + 1] = _to_i64(epoch + 1)
        sh[slot + 2] = 0
        sh[slot] = version

    # ---- resumable state ----------------------------------------------------------------

    def _state(self, seed, epoch, cursor, worker=None, workers=None, served=0):
        s = dict(version=STATE_VERSION, seed=int(seed), epoch=int(epoch), cursor=int(cursor),
                 worker=worker, num_workers=workers, served=int(served), rank=self.rank,
                 batch_size=self.batch_size, drop_last=self.drop_last,
                 world_size=self.world_size, data=self._cache()._identity())
        return s if worker is not None else _mixture.dataset_state(self, s)

    def state_dict(self, batches=None):
        """The position to resume from, a dict of plain ints (picklable, JSON-able).

        In the main process: pass batches=n, the batches the DataLoader has yielded in its
        current iteration (n = len(dataloader) at the end of an epoch gives the next epoch's
        start). Inside the process running a pass (a DataLoader worker, or the main process with
        num_workers=0) with batches=None: this process's own position after the batches it
        yielded (what torchdata's StatefulDataLoader saves per worker); after its share's last
        batch that is the end of the epoch, whose next pass is the next epoch."""
        if batches is None and self._pass is not None:
            # Not moved on to the next epoch when this process's share is done: the caller may
            # resume this same pass (StatefulDataLoader asks the worker for its next batch, which
            # must be the end of this epoch's share, not the next epoch's first).
            seed, epoch, start, served, workers, w, _ = self._pass
            if workers == 1:
                return self._state(seed, epoch, start + served)
            return self._state(seed, epoch, start, w, workers, served)
        if batches is None:
            if torch.utils.data.get_worker_info() is None:
                raise _invalid("state_dict: pass batches=n (the batches the DataLoader yielded "
                               "in its current iteration)")
            batches = 0
        n = _check_int("state_dict batches", batches, 0, _U64)
        sh = self._shared
        if int(sh[_PASS_VERSION]) == int(sh[_VERSION]):
            epoch, start = _to_u64(int(sh[_PASS_EPOCH])), int(sh[_PASS_CURSOR])
        else:  # no pass started since the last plan
            epoch, start = _to_u64(int(sh[_BASE_EPOCH])), int(sh[_BASE_CURSOR])
        total = len(self)
        cursor = start + n
        if cursor > total:
            raise _invalid(f"state_dict: batches {n} past the epoch ({total - start} batches "
                           f"from batch {start})")
        if cursor == total and total > 0:
            epoch, cursor = epoch + 1, 0
        return self._state(self.seed, epoch, cursor)

    def load_state_dict(self, state):
        """Resume from state_dict()'s position at the next pass. In the main process (before
        iter(dataloader)): a rank position, then every worker starts at its share of it. In a
        worker (StatefulDataLoader): that worker's own state. A rank's state of another batch
        size, rank or world size resumes at its global cursor. Refuses (InvalidArgumentError) a
        state of another cache or drop_last, a global cursor inside a global batch of this
        geometry, a worker's state of another geometry, in the main process or another worker."""
        version = state.get("version")
        if version not in (1, STATE_VERSION):
            raise _invalid(f"state_dict: version {version!r} is not {STATE_VERSION}")
        mine, rank_state = self._state(0, 0, 0, worker=0), state.get("worker") is None
        _elastic.check_same(state, mine, ("drop_last", "data") if rank_state else
                            ("batch_size", "drop_last", "rank", "world_size", "data"))
        seed = _check_int("state_dict seed", state.get("seed"), 0, _U64)
        epoch = _check_int("state_dict epoch", state.get("epoch"), 0, _U64)
        cursor = _mixture.dataset_cursor(self, state, mine) \
            if rank_state else _check_int("state_dict cursor", state.get("cursor"), 0, len(self))
        served = _check_int("state_dict served", state.get("served", 0), 0, _U64)
        w, workers = _worker()
        if state.get("worker") is not None:
            if (state["worker"], state.get("num_workers")) != (w, workers):
                raise _invalid(f"state_dict: the state of worker {state['worker']} of "
                               f"{state.get('num_workers')}, loaded in worker {w} of {workers} "
                               f"(a worker's state resumes that worker only)")
            self._override = (seed, epoch, cursor, served)
        elif torch.utils.data.get_worker_info() is not None:
            self._override = (seed, epoch, cursor, 0)
        else:
            self._plan(epoch, cursor, seed)

    def __repr__(self):
        return (f"dscache.torch.CacheDataset({self.path!r}, batch_size={self.batch_size}, "
                f"rank={self.rank}/{self.world_size}, {len(self)} batches/epoch)")


class CacheMapDataset(torch.utils.data.Dataset):
    """A cache as a map-style dataset: dataset[i] is sample i, for samplers and default collation.

    dataset[i] is (image, label): image a (H, W, C) uint8 tensor (HWC, as dscache.Loader.torch()
    serves batches; permute for CHW models), label an int64 scalar tensor; over a cache with
    fields a dict {"image", "label", "index", and each field in `fields` (default all)}, fixed
    fields as tensors (stack with default collation), variable ones (boxes, rows) as tensors of
    their own length, text as str and bytes as bytes (these need a collate_fn of your own).
    transform: a callable applied to the image tensor (torchvision-style), or None.
    Picklable: holds the path; each process opens the Cache on its first access.
    """

    def __init__(self, path, transform=None, fields=None, memory="auto"):
        super().__init__()
        if isinstance(fields, (str, bytes)):
            raise TypeError(f"fields must be a list of field names, not a "
                            f"{type(fields).__name__} (fields=[{fields!r}])")
        self.path = os.fspath(path)
        self.transform = transform
        self.memory = memory
        self._proc = None  # (pid, Cache)
        cache = self._cache()
        names = [f.name for f in cache.fields]
        # "image", "label" and "index" are in every sample's dict: naming them adds nothing.
        self.fields = names if fields is None else [
            n for n in fields if n not in ("image", "label", "index")]
        for name in self.fields:
            if name not in names:
                raise _invalid(f"fields: '{name}' is not a field of {self.path} (its fields: "
                               f"{', '.join(names) or 'none'})")
        self._as_dict = bool(names)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_proc"] = None
        return state

    def _cache(self):
        if self._proc is None or self._proc[0] != os.getpid():
            self._proc = (os.getpid(), Cache(self.path, memory=self.memory))
        return self._proc[1]

    def __len__(self):
        return self._cache().count

    def __getitem__(self, i):
        cache = self._cache()
        if not isinstance(i, (int, np.integer)) or isinstance(i, bool):
            raise TypeError("CacheMapDataset is indexed by one int")
        i = int(i)
        if not 0 <= i < len(cache):
            raise IndexError(f"sample {i} out of range ({len(cache)} samples)")
        image, label = cache[i]
        image = torch.from_numpy(np.array(image, copy=True))
        if self.transform is not None:
            image = self.transform(image)
        label = torch.tensor(int(label), dtype=torch.int64)
        if not self._as_dict:
            return image, label
        out = {"image": image, "label": label, "index": torch.tensor(i, dtype=torch.int64)}
        for name in self.fields:
            v = cache.field(i, name)
            if isinstance(v, (str, bytes)):
                out[name] = v
            else:
                a = np.array(v, copy=True)
                if a.dtype == np.uint16:  # as Loader.torch(): torch before 2.3 has no uint16
                    a = a.astype(np.int32)
                elif a.dtype in (np.uint32, np.uint64):
                    a = a.astype(np.int64)
                out[name] = torch.from_numpy(a)
        return out

    def __repr__(self):
        return f"dscache.torch.CacheMapDataset({self.path!r}, {len(self)} samples)"
