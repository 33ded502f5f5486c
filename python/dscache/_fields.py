"""Fields: the named, typed values a sample carries besides its image and label (a mask, boxes
and their classes, a regression target, a caption; docs/FORMAT.md "Fields"). The spec classes
dscache.Writer(fields=...) takes and dscache.Cache.fields gives back, the conversion of one
write()'s values to the bytes CacheWriter stores, and the way back for Cache.field()."""
import numpy as np

from ._checks import _U32, _check_ints, _invalid

DTYPES = ("uint8", "uint16", "int64", "float32")


def _dtype_name(dtype, what):
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if name not in DTYPES:
        raise _invalid(f"{what}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    return name


class Field:
    """One field's spec: kind, dtype, shape (array: one value's; rows: one row's), rows_of,
    classes, allow_nonfinite (float32 Scalar, Array, Rows: NaN and inf are values it may hold;
    otherwise the Writer refuses them), and its name (None until it is given one by
    Writer(fields={name: spec}) or read from a cache). Make one with Mask, Scalar, Array, Boxes,
    Rows, Text or Bytes."""

    kind = None

    def __init__(self, dtype, shape=(), rows_of=None, classes=None, name=None,
                 allow_nonfinite=False):
        self.name = name
        self.dtype = _dtype_name(dtype, f"{type(self).__name__}")
        # Each dimension a uint32 as the binding takes it; libcache's validate_field checks the
        # rest (each > 0, at most 4 dimensions, at most 2^32 elements) at Writer(...).
        self.shape = _check_ints(f"{type(self).__name__} shape", shape, 0, _U32)
        self.rows_of = rows_of or None
        self.classes = None if classes is None else [str(c) for c in classes]
        self.allow_nonfinite = bool(allow_nonfinite)

    @property
    def variable(self):
        """True when a sample holds any number of rows (boxes, rows, bytes, text)."""
        return self.kind in ("boxes", "rows", "bytes", "text")

    def to_dict(self):
        return {"name": self.name, "kind": self.kind, "dtype": self.dtype,
                "shape": list(self.shape), "rows_of": self.rows_of or "",
                "classes": list(self.classes or []), "allow_nonfinite": self.allow_nonfinite}

    def _key(self):
        return (self.kind, self.dtype, self.shape, self.rows_of, tuple(self.classes or ()),
                self.allow_nonfinite)

    def __eq__(self, other):
        return isinstance(other, Field) and (self.name, self._key()) == (other.name, other._key())

    def __hash__(self):
        return hash((self.name, self._key()))

    def __repr__(self):
        args = [f"{self.dtype!r}"] if self.kind in ("mask", "scalar", "array", "rows") else []
        if self.kind in ("array", "rows") and (self.shape or self.kind == "array"):
            args.append(f"shape={self.shape}")
        if self.rows_of:
            args.append(f"rows_of={self.rows_of!r}")
        if self.classes:
            args.append(f"classes={self.classes!r}")
        if self.allow_nonfinite:
            args.append("allow_nonfinite=True")
        if self.name is not None:
            args.append(f"name={self.name!r}")
        return f"dscache.{type(self).__name__}({', '.join(args)})"


class Mask(Field):
    """A per-pixel class-id map the size of its image: (H, W) uint8 or uint16, lossless;
    cropped, resized (nearest) and flipped with the image by the Loader."""
    kind = "mask"

    def __init__(self, dtype="uint8", classes=None, name=None):
        super().__init__(dtype, (), None, classes, name)


class Scalar(Field):
    """One int64 or float32 per sample (a regression target, an id). allow_nonfinite=True
    (float32): NaN and inf are stored (a missing target); by default they are refused."""
    kind = "scalar"

    def __init__(self, dtype, name=None, allow_nonfinite=False):
        super().__init__(dtype, (), None, None, name, allow_nonfinite)


class Array(Field):
    """A fixed shape per sample (a multi-hot vector, a fixed set of keypoints)."""
    kind = "array"

    def __init__(self, dtype, shape, classes=None, name=None, allow_nonfinite=False):
        shape = (shape,) if isinstance(shape, (int, np.integer)) else shape
        super().__init__(dtype, shape, None, classes, name, allow_nonfinite)


class Boxes(Field):
    """n float32 rows x1 y1 x2 y2 per sample, in the stored image's pixels
    (0 <= x1 < x2 <= W, 0 <= y1 < y2 <= H); mapped, clipped and dropped with the image's crop."""
    kind = "boxes"

    def __init__(self, name=None):
        super().__init__("float32", (4,), None, None, name)


class Rows(Field):
    """n rows of `shape` per sample (n varies; shape () = one element a row). rows_of: the name
    of a Boxes field: one row per box, dropped with its box (a box's class, its crowd flag)."""
    kind = "rows"

    def __init__(self, dtype, shape=(), rows_of=None, classes=None, name=None,
                 allow_nonfinite=False):
        shape = (shape,) if isinstance(shape, (int, np.integer)) else shape
        super().__init__(dtype, shape, rows_of, classes, name, allow_nonfinite)


class Text(Field):
    """A str per sample, stored as UTF-8 (a caption)."""
    kind = "text"

    def __init__(self, name=None):
        super().__init__("uint8", (), None, None, name)


class Bytes(Field):
    """Any bytes per sample (a JSON blob, an encoded payload)."""
    kind = "bytes"

    def __init__(self, name=None):
        super().__init__("uint8", (), None, None, name)


KINDS = {c.kind: c for c in (Mask, Scalar, Array, Boxes, Rows, Text, Bytes)}


def from_dict(d):
    """The spec of a cache's field (the binding's dict) as its Field class."""
    f = Field.__new__(KINDS[d["kind"]])
    Field.__init__(f, d["dtype"], d["shape"], d["rows_of"], d["classes"] or None, d["name"],
                   d.get("allow_nonfinite", False))
    return f


def declare(fields):
    """Writer(fields=...): a mapping name -> Field (field order = its order), or a sequence of
    named Fields (a cache's .fields) or (name, Field) pairs. Returns named copies."""
    if fields is None:
        return []
    items = fields.items() if hasattr(fields, "items") else [
        (f.name, f) if isinstance(f, Field) else tuple(f) for f in fields]
    out = []
    for name, spec in items:
        if not isinstance(spec, Field):
            raise TypeError(f"fields[{name!r}]: expected a dscache field spec (dscache.Mask, "
                            f"Scalar, Array, Boxes, Rows, Text, Bytes), got {type(spec).__name__}")
        if not isinstance(name, str):
            raise TypeError(f"fields: a field name must be a str, got {name!r}")
        f = Field.__new__(type(spec))
        f.__dict__.update(spec.__dict__, name=name)
        out.append(f)
    return out


def _fail(spec, who, reason):
    return _invalid(f"{who}: field '{spec.name}': {reason}")


def _numeric(spec, value, who):
    """value as a little-endian array of spec.dtype, refusing a conversion that changes a value
    (1.5 into int64, -1 or 300 into uint8, NaN into an int, 2**25 + 1 into float32, a finite
    float into float32's inf). float64 into float32 rounds, as a float32 field means."""
    dst = np.dtype(spec.dtype).newbyteorder("<")
    try:
        src = np.asarray(value)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{who}: field '{spec.name}': not an array of numbers ({e})") from None
    if src.dtype.kind not in "biuf":
        raise TypeError(f"{who}: field '{spec.name}': a {type(value).__name__} ({src.dtype}) "
                        f"cannot be stored as {spec.dtype}: numbers only (ints within int64)")
    if src.dtype == dst or np.can_cast(src.dtype, dst, "safe"):
        return src.astype(dst, copy=False)
    with np.errstate(all="ignore"):
        out = src.astype(dst)
        if dst.kind == "f" and src.dtype.kind == "f":
            lost = np.isfinite(src) & ~np.isfinite(out)
        else:
            back = out.astype(src.dtype)
            lost = ~((back == src) & np.isfinite(out.astype(np.float64)))
    if np.any(lost):
        k = tuple(int(x) for x in np.argwhere(lost)[0]) if src.ndim else ()
        v = src[k] if k else src[()]
        where = f" at {k}" if k else ""
        raise _fail(spec, who, f"value {v!r}{where} ({src.dtype}) does not fit {spec.dtype} "
                               f"without changing it")
    return out


def to_array(spec, value, height, width, who):
    """One sample's value of `spec` (for an image of height x width) as the C-contiguous
    little-endian array CacheWriter::append stores. TypeError for a value of the wrong kind
    (a str for a number), dscache.InvalidArgumentError (a ValueError) for a wrong shape or a
    value the dtype cannot hold, each naming the field. CacheWriter checks the rest (boxes
    inside the image, rows_of counts, UTF-8) and names the field too."""
    if spec.kind == "text":
        if isinstance(value, str):
            try:
                value = value.encode("utf-8")
            except UnicodeEncodeError as e:
                raise _fail(spec, who, f"not encodable as UTF-8 ({e.reason})") from None
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"{who}: field '{spec.name}': text takes a str, got "
                            f"{type(value).__name__}")
        return np.frombuffer(bytes(value), np.uint8)
    if spec.kind == "bytes":
        if isinstance(value, (bytes, bytearray, memoryview)):
            return np.frombuffer(bytes(value), np.uint8)
        if isinstance(value, np.ndarray) and value.dtype == np.uint8:
            return np.ascontiguousarray(value).reshape(-1)
        raise TypeError(f"{who}: field '{spec.name}': bytes takes bytes or a uint8 array, got "
                        f"{type(value).__name__}" +
                        (" (encode it, or declare the field dscache.Text())"
                         if isinstance(value, str) else ""))
    a = _numeric(spec, value, who)
    if spec.kind == "mask":
        if a.ndim == 3 and a.shape[2] == 1:
            a = a[:, :, 0]
        if a.shape != (height, width):
            raise _fail(spec, who, f"mask shape {a.shape}, the image is {height}x{width} "
                                   f"(a mask is ({height}, {width}))")
    elif spec.kind == "scalar":
        if a.size != 1 or a.ndim > 1:
            raise _fail(spec, who, f"a scalar takes one value, got shape {a.shape}")
        a = a.reshape(())
    elif spec.kind == "array":
        if a.shape != spec.shape:
            raise _fail(spec, who, f"shape {a.shape}, the field's is {spec.shape}")
    else:  # boxes, rows: n rows of spec.shape
        if a.size == 0:
            a = a.reshape((0,) + spec.shape)
        if a.ndim != 1 + len(spec.shape) or a.shape[1:] != spec.shape:
            want = "(n, " + ", ".join(map(str, spec.shape)) + ")" if spec.shape else "(n,)"
            raise _fail(spec, who, f"shape {a.shape} is not {want}: n rows of {spec.shape}")
    return np.ascontiguousarray(a)


def from_bytes(spec, raw, rows, height, width):
    """Cache.field(): the uint8 copy the binding returns as the field's value."""
    if spec.kind == "text":
        return raw.tobytes().decode("utf-8")
    if spec.kind == "bytes":
        return raw.tobytes()
    a = raw.view(np.dtype(spec.dtype).newbyteorder("<"))
    if spec.kind == "mask":
        return a.reshape(height, width)
    if spec.kind == "scalar":
        return a[0]
    if spec.kind == "array":
        return a.reshape(spec.shape)
    return a.reshape((int(rows),) + spec.shape)
