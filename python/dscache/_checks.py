"""Argument checks shared by the dscache package's modules (dscache.Loader, dscache.Writer)."""
import os

import numpy as np

from ._errors import InvalidArgumentError

_U64 = 2**64 - 1
_U32 = 2**32 - 1
_I64_MIN, _I64_MAX = -2**63, 2**63 - 1


def _invalid(reason):
    return InvalidArgumentError(f"InvalidArgument: {reason}", "", reason)


def _check_int(name, v, lo, hi):
    """int(v) when lo <= v <= hi, else InvalidArgumentError naming `name` (not a TypeError or an
    OverflowError from the binding later)."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise _invalid(f"{name}: must be an int, got {v!r}")
    v = int(v)
    if v < lo or v > hi:
        raise _invalid(f"{name}: {v} is outside {lo}..{hi}")
    return v


def _check_str(name, v, allowed=None):
    """v when it is a str (TypeError naming `name` otherwise: the binding would say only
    "incompatible function arguments"); with `allowed`, InvalidArgumentError unless v is one."""
    if not isinstance(v, str):
        what = f"one of {', '.join(allowed)}" if allowed else "a str"
        raise TypeError(f"{name}: must be {what}, got {v!r}")
    if allowed is not None and v not in allowed:
        raise _invalid(f"{name}: {v!r} is not one of {', '.join(allowed)}")
    return v


def _check_ints(name, v, lo, hi, lengths=None):
    """A tuple of ints lo..hi from the sequence v, of one of `lengths` (None: any length); each
    element checked as _check_int does, named `name[k]`."""
    if isinstance(v, (str, bytes)) or not hasattr(v, "__len__") or \
            (lengths is not None and len(v) not in lengths):
        counts = "" if lengths is None else " or ".join(str(n) for n in lengths) + " "
        raise _invalid(f"{name}: must be a sequence of {counts}ints, got {v!r}")
    return tuple(_check_int(f"{name}[{k}]", x, lo, hi) for k, x in enumerate(v))


def _check_float(name, v):
    """float(v) for a real number (not a bool), else InvalidArgumentError naming `name`."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer,
                                                               np.floating)):
        raise _invalid(f"{name}: must be a number, got {v!r}")
    return float(v)


def _sample_index(i, n):
    """Sample index i (negative counts from the end) of n samples as 0..n-1: TypeError for a
    non-int, IndexError naming i and n when out of range (however large)."""
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
        raise TypeError(f"a sample index must be one int, got {i!r}")
    i = int(i)
    k = i + n if i < 0 else i
    if not 0 <= k < n:
        raise IndexError(f"sample index {i} out of range ({n} samples)")
    return k


def _check_path(name, v):
    """os.fspath(v) as a str for a str or os.PathLike (TypeError naming `name` otherwise)."""
    try:
        p = os.fspath(v)
    except TypeError:
        raise TypeError(f"{name}: must be a str or os.PathLike, got {v!r}") from None
    return os.fsdecode(p)
