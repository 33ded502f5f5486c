"""Argument checks shared by the dscache package's modules (dscache.Loader, dscache.Writer)."""
import numpy as np

from ._errors import InvalidArgumentError

_U64 = 2**64 - 1
_U32 = 2**32 - 1


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
