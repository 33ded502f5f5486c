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
torch's way: nothing ever waits on the main process. Better still, the worker's Loader fills
the slots itself (dscache.Loader(_slots=ring), attached before it allocates its first buffers):
the batch is then sent without any copy.

Files live in /dev/shm as dscache-torch-<main pid>-<worker pid>-<n>: the worker removes its own
at exit; the main process removes those of workers that died (killed ones included) whenever it
meets a new ring or makes or iterates a CacheDataset, and at exit all of its own.
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
_HEADER = 64   # bytes before slot 0 (at least; a multiple of 64): slot k's flag is byte k
               # (1 = in flight, 0 = free)
_count = 0     # rings made by this process
# Main process: the slots taken, by how the worker filled them ("in_place": its Loader filled
# the slot itself, "copied": the worker copied the batch in).
taken = {"in_place": 0, "copied": 0}


def _round64(n):
    return -(-int(n) // 64) * 64


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class Ring:
    """Worker side: `slots` slots of slot_bytes each (rounded up to 64 bytes, so that every slot
    is aligned as the Loader's batch buffers must be). Not thread-safe (one worker thread).

    Two ways to fill a slot: put() copies an array into the next one, or the worker's Loader
    fills slots itself (dscache.Loader(_slots=ring), or PyLoader.attach_shared_slots(name,
    header, slot_bytes, slots) later: it takes a slot whose flag is 0 for each new batch buffer) and handle() sends one. Use one way per
    Ring: put() does not know which slots the Loader holds."""

    def __init__(self, slot_bytes, slots=SLOTS):
        global _count
        _count += 1
        self.slot_bytes = _round64(max(1, int(slot_bytes)))
        self.slots = int(slots)
        self.header = max(_HEADER, _round64(self.slots))
        self.size = self.header + self.slots * self.slot_bytes
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
        self.flags = np.frombuffer(self.map, np.uint8, self.slots)
        self.next = 0
        multiprocessing.util.Finalize(self, _unlink, (self.name,), exitpriority=10)

    def put(self, a, slot=None):
        """A Handle to a copy of numpy array `a` in the next slot, or None when that slot is
        still in flight or `a` does not fit. slot=k: into slot k, which the caller claimed (its
        flag already 1: PyLoader.claim_slot)."""
        k = self.next if slot is None else slot
        if a.nbytes > self.slot_bytes or (slot is None and self.flags[k] != 0):
            return None
        if slot is None:
            self.next = (k + 1) % self.slots
        dst = np.frombuffer(self.map, a.dtype, a.size, self.header + k * self.slot_bytes)
        np.copyto(dst.reshape(a.shape), a)
        self.flags[k] = 1
        return self.handle(k, a, in_place=False)

    def handle(self, k, a, in_place=True):
        """A Handle to slot k holding array `a`'s dtype and shape (no copy: `a` is the slot's
        memory, filled by the Loader), its flag already 1."""
        return Handle(self.name, self.size, self.header + k * self.slot_bytes, k, a.dtype.str,
                      a.shape, in_place)


class Handle:
    """A slot's array in flight; unpickled (in the main process) it is a torch.Tensor that owns
    the slot until it dies."""

    def __init__(self, name, size, offset, slot, dtype, shape, in_place=False):
        self.args = (name, size, offset, slot, dtype, tuple(shape), bool(in_place))

    def __reduce__(self):
        return _take, self.args


_maps = {}  # main process: ring file -> its mapping
_lock = threading.Lock()


def _owners(name):
    """(main pid, worker pid) a ring file is named after."""
    parts = os.path.basename(name)[len(_PREFIX):].split("-")
    return int(parts[0]), int(parts[1])


def _worker_alive(parent, pid):
    """Whether worker `pid`, made by process `parent`, still runs: a zombie (exited, not yet
    waited for) or a process of that number with another parent (the number reused) is not it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
        return state not in ("Z", "X") and int(ppid) == parent
    except FileNotFoundError:
        return False
    except (OSError, ValueError, IndexError):  # no /proc: whether the number is in use
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True


def _reap():
    """Closes and removes the rings of workers that exited: those this process mapped, and every
    file named after this process (a worker killed before its first batch reached this process
    made one that was never mapped here). Non-persistent workers make new rings every epoch,
    and a SIGKILLed one cannot remove its own: run whenever this process meets a new ring, and
    when a CacheDataset is made or iterated here."""
    mine = glob.glob(os.path.join(_DIR, f"{_PREFIX}{os.getpid()}-*"))
    for name in set(_maps) | set(mine):
        try:
            alive = _worker_alive(*_owners(name))
        except (ValueError, IndexError):  # not a name this module makes
            continue
        if alive:
            continue
        _unlink(name)
        m = _maps.pop(name, None)
        if m is not None:
            try:
                m.close()
            except BufferError:  # a tensor still holds a slot: unmapped when the last one dies
                pass


def reap():
    """_reap() under the lock the main process's unpickling takes."""
    with _lock:
        _reap()


def _take(name, size, offset, slot, dtype, shape, in_place=False):
    import torch
    with _lock:
        taken["in_place" if in_place else "copied"] += 1
        m = _maps.get(name)
        if m is None:
            # Mapped before reaping: a worker that died after sending this batch (SIGKILLed, or
            # a zombie not yet waited for) left it whole in its ring, and the reaping below
            # would otherwise remove the file under it.
            try:
                fd = os.open(name, os.O_RDWR)
            except FileNotFoundError:
                _reap()
                raise RuntimeError(
                    f"DataLoader worker (pid {_owners(name)[1]}) exited before the main process "
                    f"took its batch: its shared-memory ring {name} is gone") from None
            try:
                m = mmap.mmap(fd, size)
            finally:
                os.close(fd)
            _reap()
            _maps[name] = m
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
