"""dscache's exceptions: one class per libcache ErrorKind (libcache/include/dscache/error.h).

Every error the C++ library raises arrives as an instance of the class for its kind, with the
kind, the file and the reason kept apart:

    try:
        dscache.Cache("fm-train")
    except dscache.CorruptionError as e:
        print(e.kind, e.path, e.reason)   # "Corruption", ".../images-00000.npy", "file holds ..."

str(e) is the C++ what(): "Corruption: .../images-00000.npy: file holds 1000 bytes, ...".
Each class also derives from the closest built-in exception (NotFoundError is a
FileNotFoundError, InvalidArgumentError a ValueError, IOError an OSError, UnsupportedError a
NotImplementedError), so generic handlers keep working.
"""

import builtins


class Error(Exception):
    """Base of every dscache error. Attributes: kind (str), path (str, may be ""), reason."""

    kind = "Error"

    def __init__(self, message, path="", reason=""):
        Exception.__init__(self, message)
        self.path = path
        self.reason = reason or message

    def __str__(self):
        return str(self.args[0]) if self.args else self.kind

    def __reduce__(self):  # picklable across processes (DataLoader workers, multiprocessing)
        return (type(self), (str(self), self.path, self.reason))


class NotFoundError(Error, builtins.FileNotFoundError):
    """A file or directory that must exist does not."""
    kind = "NotFound"


class CorruptionError(Error):
    """A file exists but its bytes disagree with the format or the manifest."""
    kind = "Corruption"


class InvalidArgumentError(Error, builtins.ValueError):
    """The caller asked for something impossible (bad option, index out of range)."""
    kind = "InvalidArgument"


class IOError(Error, builtins.OSError):  # noqa: A001 - named after ErrorKind::kIOError
    """The operating system refused a read, write, rename, mmap..."""
    kind = "IOError"


class UnsupportedError(Error, builtins.NotImplementedError):
    """Valid input this build cannot handle (e.g. HDF5 without HDF5 support)."""
    kind = "Unsupported"


class BusyError(Error):
    """Another process holds the lock on the path (dscache/lock.h)."""
    kind = "Busy"


class RemoteError(Error, builtins.OSError):
    """Object storage (s3://, http(s)://) refused a request or failed after its retries; .path is
    the URL, .reason the HTTP status or the cause (never a credential)."""
    kind = "Remote"


BY_KIND = {c.kind: c for c in (NotFoundError, CorruptionError, InvalidArgumentError, IOError,
                               UnsupportedError, BusyError, RemoteError)}


def from_cpp(kind, path, reason, what):
    """The exception for a C++ dscache::Error (called by the binding's translator)."""
    cls = BY_KIND.get(kind, Error)
    e = cls.__new__(cls)
    Error.__init__(e, what, path, reason)
    return e
