"""dscache.Writer: writing a cache from Python through libcache's CacheWriter."""

import numpy as np

from . import _dscache, _fields
from ._checks import _U32, _U64, _check_int, _check_ints, _check_path, _check_str, _invalid


def build_order(n, seed):
    """The order `dscache build --shuffle SEED` stores a listing of n entries in (uint64 array):
    write item build_order(n, seed)[i] as the i-th sample of a Writer(shuffle_seed=seed)."""
    _check_int("n", n, 0, _U64)
    _check_int("seed", seed, 0, _U64)
    return _dscache.build_order(int(n), int(seed))


class Writer:
    """Writes a cache at `path` through libcache's CacheWriter, as `dscache build` does: into
    `.NAME.partial` beside it, published by one rename when the `with` block ends (or
    publish()). An exception inside the block (or close()) leaves the partial directory: a
    Writer(..., resume=True) with the same options keeps its finished shards, and `position`
    says how many writes (and skips) it kept, so the caller continues from there:

        with dscache.Writer(path, shape=(32, 32), classes=names, resume=True) as w:
            for i in range(w.position, len(items)):
                w.write(*items[i])

    shape: (H, W) or (H, W, C) of every sample for layout="fixed" (the default); None with
      layout="ragged" (each sample its own size; channels= gives C, default 3). C is 1 (grey),
      3 (RGB) or 4 (RGBA, straight alpha: recorded as alpha "keep", raw codec only).
    classes: class names; a label is an index into them. None: an unlabeled cache (any int).
    codec: "raw" (pixels) or "jpeg" (write() encodes at `quality`; write_encoded() takes a
      stream as is). storage: "npy" or "hdf5". shard_size: bytes of samples per shard.
    shuffle_seed: None (samples stored as written), or the seed of build_order() when the
      caller writes its items in that order (recorded in the manifest as `--shuffle` is).
    max_side: recorded as the ragged layout's limit (0: none).
    force: replace an existing cache at `path`, or discard an interrupted write of it.
    resume: continue an interrupted write with the same options (fields included).
    fields: the named, typed values every sample carries besides its image and label
      (docs/FORMAT.md "Fields"; the cache is then format_version 3), as {name: spec} in field
      order, a spec being dscache.Mask, Scalar, Array, Boxes, Rows, Text or Bytes:

        fields={"mask": dscache.Mask("uint8", classes=["bg", "cat"]),
                "boxes": dscache.Boxes(), "box_labels": dscache.Rows("int64", rows_of="boxes"),
                "score": dscache.Scalar("float32"), "caption": dscache.Text()}

      (or a cache's .fields, to write another cache with the same fields). write() then takes
      one value for each: write(image, label, mask=m, boxes=b, ...) or fields={...}.

    Not thread-safe: write from one thread. Images are copied into the shards at write()."""

    def __init__(self, path, shape=None, classes=None, codec="raw", layout="fixed",
                 shard_size=256 << 20, shuffle_seed=None, storage="npy", quality=90,
                 channels=None, max_side=0, force=False, resume=False, fields=None):
        path = _check_path("path", path)
        self._fields = _fields.declare(fields)
        _check_str("layout", layout, ("fixed", "ragged"))
        _check_str("codec", codec)
        _check_str("storage", storage)
        if channels is not None:
            channels = _check_int("channels", channels, 0, _U32)
        if isinstance(classes, (str, bytes)):
            raise TypeError(f"classes: must be a list of class names, not a "
                            f"{type(classes).__name__} (classes=[{classes!r}])")
        height = width = 0
        if layout == "fixed":
            if shape is None:
                raise _invalid("shape: a fixed-layout cache needs (H, W) or (H, W, C)")
            shape = _check_ints("shape", shape, 0, _U32, (2, 3))
            height, width = shape[0], shape[1]
            c = shape[2] if len(shape) == 3 else (3 if channels is None else channels)
            if channels is not None and int(channels) != c:
                raise _invalid(f"channels={channels} disagrees with shape {tuple(shape)}")
            channels = c
        elif shape is not None:
            raise _invalid("shape: a ragged cache has no fixed shape (pass channels= instead)")
        channels = 3 if channels is None else int(channels)
        _check_int("shard_size", shard_size, 1, _U64)
        _check_int("quality", quality, 1, 100)
        _check_int("max_side", max_side, 0, _U32)
        if shuffle_seed is not None:
            _check_int("shuffle_seed", shuffle_seed, 0, _U64)
        names = [] if classes is None else [str(c) for c in classes]
        self._w = _dscache.Writer(
            path, storage, layout, codec, height, width, channels, int(quality), int(shard_size),
            names, shuffle_seed is not None, int(shuffle_seed or 0), int(max_side),
            [(f.name, f.kind, f.dtype, list(f.shape), f.rows_of or "", f.classes or [],
              f.allow_nonfinite) for f in self._fields], bool(force), bool(resume))
        self.path = path
        self._channels = channels

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._w.closed:
            return False
        if exc_type is None:
            self.publish()
        else:
            self._w.close()  # resumable: the finished shards stay in the partial directory
        return False

    @property
    def fields(self):
        """The declared fields (named dscache.Field specs), in field order."""
        return list(self._fields)

    def write(self, image, label=0, name=None, fields=None, **values):
        """Appends one sample: a (H, W, C) uint8 array (or (H, W) for one channel) and its
        label; `name` (default: its position) is recorded in sources.jsonl. With fields, one
        value for each, as keywords or fields={name: value} (needed for a field called `name`
        or `fields`): numpy arrays, lists, Python numbers, str (Text), bytes (Bytes), converted
        to the field's dtype when no value changes (see docs/PYTHON.md)."""
        a = np.asarray(image)
        if a.dtype != np.uint8:
            raise _invalid(f"image dtype is {a.dtype}, expected uint8")
        if a.ndim == 2 and self._channels == 1:
            a = a[:, :, None]
        who = str(self._w.position) if name is None else str(name)
        h, w = (int(a.shape[0]), int(a.shape[1])) if a.ndim >= 2 else (0, 0)
        self._w.write(a, int(label), who, self._values(fields, values, h, w, who))

    def write_encoded(self, data, height, width, label=0, name=None, fields=None, **values):
        """codec="jpeg": appends an encoded JPEG stream (bytes) that decodes to
        height x width x channels, as is; fields as in write()."""
        who = str(self._w.position) if name is None else str(name)
        self._w.write_encoded(bytes(data), int(height), int(width), int(label), who,
                              self._values(fields, values, int(height), int(width), who))

    def _values(self, fields, values, height, width, who):
        """One value per declared field, in field order, as the arrays the binding stores."""
        given = dict(fields or {})
        for k in values:
            if k in given:
                raise _invalid(f"{who}: field '{k}' given twice (keyword and fields=)")
        given.update(values)
        known = [f.name for f in self._fields]
        for k in given:
            if k not in known:
                raise _invalid(f"{who}: unknown field '{k}' (the cache has "
                               f"{', '.join(known) if known else 'no fields'})")
        out = []
        for f in self._fields:
            if f.name not in given:
                raise _invalid(f"{who}: no value for field '{f.name}' (every sample needs one "
                               f"for each of {', '.join(known)})")
            out.append(_fields.to_array(f, given[f.name], height, width, who))
        return out

    def skip(self, name, reason):
        """Records an item that was not written, and why (skipped.jsonl)."""
        self._w.skip(str(name), str(reason))

    def cut_shard(self):
        """Ends the current shard here (shards are otherwise cut by shard_size)."""
        self._w.cut_shard()

    def publish(self):
        """Writes the side files and manifest and moves the cache to `path`; returns `path`."""
        self._w.publish()
        return self.path

    def abandon(self):
        """Removes the partial directory and everything written into it."""
        self._w.abandon()

    def close(self):
        """Stops without publishing; the partial directory stays for resume=True."""
        self._w.close()

    @property
    def position(self):
        """Writes and skips so far, those kept by a resume included."""
        return self._w.position

    @property
    def count(self):
        """Samples written so far (kept by a resume included)."""
        return self._w.count

    @property
    def resumed(self):
        """Samples kept from an interrupted write."""
        return self._w.resumed
