"""Hands a DataLoader worker's batch images to the main process through a ring of reusable
shared-memory slots (dscache.torch.CacheDataset's worker side).

torch sends a tensor from a worker by moving its storage into a new shared-memory segment and
passing its file descriptor over a socket: per batch a fresh segment, page faults on both sides
and a socket round trip (measured here: about 100k samples/s of 64x64x3 at most, whatever the
data loader). A Ring instead copies the image into one of a few slots of a file mapped in both
processes and sends a small Handle; unpickling it in the main process (the DataLoader's main
or pin-memory thread) makes a tensor over the slot that owns it: the slot is freed only when
that tensor (and every view of it) is gone, so nothing else ever writes it while the user holds
it. A worker that finds its next slot still held returns None and the caller sends the tensor
torch's way: nothing ever waits on the main process.

Files live in /dev/shm as dscache-torch-<main pid>-<worker pid>-<n>: the worker removes its own
at exit, the main process removes those of workers that died and, at exit, all of its own.
torch is imported inside functions only (`import dscache` must not load it).
"""
import atexit
import glob
import mmap
import multiprocessing.util
import os
import tempfile
import threading
import weakref

import numpy as np

_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
_PREFIX = "dscache-torch-"
SLOTS = 6      # per worker: DataLoader prefetches 2 batches a worker, plus those being taken
_HEADER = 64   # bytes before slot 0: slot k's flag is byte k (1 = in flight, 0 = free)
_count = 0     # rings made by this process


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class Ring:
    """Worker side: SLOTS slots of slot_bytes each. Not thread-safe (one worker thread)."""

    def __init__(self, slot_bytes):
        global _count
        _count += 1
        self.slot_bytes = int(slot_bytes)
        self.size = _HEADER + SLOTS * self.slot_bytes
        self.name = os.path.join(_DIR, f"{_PREFIX}{os.getppid()}-{os.getpid()}-{_count}")
        fd = os.open(self.name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            # Allocated now, not on first touch: a full /dev/shm (a container's 64 MiB default)
            # is an OSError here, where the caller falls back to torch's handoff, instead of a
            # SIGBUS in the middle of a copy.
            os.posix_fallocate(fd, 0, self.size)
            self.map = mmap.mmap(fd, self.size)
        except BaseException:
            os.close(fd)
            _unlink(self.name)
            raise
        os.close(fd)
        self.flags = np.frombuffer(self.map, np.uint8, SLOTS)
        self.next = 0
        multiprocessing.util.Finalize(self, _unlink, (self.name,), exitpriority=10)

    def put(self, a):
        """A Handle to a copy of numpy array `a` in the next slot, or None when that slot is
        still in flight or `a` does not fit."""
        k = self.next
        if a.nbytes > self.slot_bytes or self.flags[k] != 0:
            return None
        self.next = (k + 1) % SLOTS
        dst = np.frombuffer(self.map, a.dtype, a.size, _HEADER + k * self.slot_bytes)
        np.copyto(dst.reshape(a.shape), a)
        self.flags[k] = 1
        return Handle(self.name, self.size, _HEADER + k * self.slot_bytes, k, a.dtype.str,
                      a.shape)


class Handle:
    """A slot's array in flight; unpickled (in the main process) it is a torch.Tensor that owns
    the slot until it dies."""

    def __init__(self, name, size, offset, slot, dtype, shape):
        self.args = (name, size, offset, slot, dtype, tuple(shape))

    def __reduce__(self):
        return _take, self.args


_maps = {}  # main process: ring file -> its mapping
_lock = threading.Lock()


def _worker_pid(name):
    return int(os.path.basename(name)[len(_PREFIX):].split("-")[1])


def _reap():
    """Closes and removes the rings of workers that exited (non-persistent workers make new
    ones every epoch)."""
    for name in list(_maps):
        try:
            os.kill(_worker_pid(name), 0)
        except ProcessLookupError:
            m = _maps.pop(name)
            _unlink(name)
            try:
                m.close()
            except BufferError:  # a tensor still holds a slot: unmapped when the last one dies
                pass
        except (PermissionError, ValueError, IndexError):
            pass


def _take(name, size, offset, slot, dtype, shape):
    import torch
    with _lock:
        m = _maps.get(name)
        if m is None:
            _reap()
            fd = os.open(name, os.O_RDWR)
            try:
                m = _maps[name] = mmap.mmap(fd, size)
            finally:
                os.close(fd)
        a = np.frombuffer(m, np.dtype(dtype), int(np.prod(shape)), offset).reshape(shape)
    weakref.finalize(a, _free, m, slot)  # the tensor holds `a`: dies with its last view
    return torch.from_numpy(a)


def _free(m, slot):
    try:
        m[slot] = 0
    except ValueError:  # the mapping was closed (its worker exited)
        pass


@atexit.register
def _remove_own():
    """Main process at exit: every ring its workers made (a worker killed before its own
    finalizer ran leaves one)."""
    for m in list(_maps.values()):
        try:
            m.close()
        except BufferError:
            pass
    for name in glob.glob(os.path.join(_DIR, f"{_PREFIX}{os.getpid()}-*")):
        _unlink(name)
