#!/usr/bin/python3
"""XXH64 (seed 0 by default) in pure Python, so the tests need no xxhash module: the hash
dscache's manifests and checksums.npy record (docs/FORMAT.md). selftest() checks it against
the xxHash project's reference values; cli_helpers.main runs it before every case.
"""

import struct
from pathlib import Path


_M64 = (1 << 64) - 1
_P1, _P2, _P3 = 11400714785074694791, 14029467366897019727, 1609587929392839161
_P4, _P5 = 9650029242287828579, 2870177450012600261


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _M64


def _round(acc, lane):
    acc = (acc + lane * _P2) & _M64
    return (_rotl(acc, 31) * _P1) & _M64


def _merge(h, v):
    h ^= _round(0, v)
    return (h * _P1 + _P4) & _M64


def xxh64(data, seed=0):
    data = bytes(data)
    n, i = len(data), 0
    if n >= 32:
        v1, v2 = (seed + _P1 + _P2) & _M64, (seed + _P2) & _M64
        v3, v4 = seed & _M64, (seed - _P1) & _M64
        lanes = struct.unpack_from("<%dQ" % (4 * (n // 32)), data, 0)
        for j in range(0, len(lanes), 4):
            v1 = _round(v1, lanes[j])
            v2 = _round(v2, lanes[j + 1])
            v3 = _round(v3, lanes[j + 2])
            v4 = _round(v4, lanes[j + 3])
        i = 32 * (n // 32)
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M64
        for v in (v1, v2, v3, v4):
            h = _merge(h, v)
    else:
        h = (seed + _P5) & _M64
    h = (h + n) & _M64
    while i + 8 <= n:
        h ^= _round(0, struct.unpack_from("<Q", data, i)[0])
        h = (_rotl(h, 27) * _P1 + _P4) & _M64
        i += 8
    if i + 4 <= n:
        h ^= (struct.unpack_from("<I", data, i)[0] * _P1) & _M64
        h = (_rotl(h, 23) * _P2 + _P3) & _M64
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _M64
        h = (_rotl(h, 11) * _P1) & _M64
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M64
    h ^= h >> 29
    h = (h * _P3) & _M64
    h ^= h >> 32
    return h


def selftest():
    """Raises ValueError where xxh64 disagrees with the xxHash project's values (seed 0)."""
    for data, want in ((b"", 0xEF46DB3751D8E999), (b"a", 0xD24EC4F1A98C6E5B),
                       (b"abc", 0x44BC2CF5AD770999)):
        if xxh64(data) != want:
            raise ValueError(f"xxh64 self-test {data!r}: {xxh64(data):016x}, want {want:016x}")


def file_xxh64(path):
    return "%016x" % xxh64(Path(path).read_bytes())
