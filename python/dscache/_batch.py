"""Batches of a cache with fields (format_version 3): the dict dscache.Loader yields, its torch
form, and the helpers that cut a flat variable-length field into per-sample values (the lists
torchvision's detection models take)."""
from collections.abc import Mapping

import numpy as np

from ._checks import _invalid
from ._errors import InvalidArgumentError


class Batch(dict):
    """One batch of a cache with fields, a dict:

    "image" (B, H, W, C) uint8 -- a fresh array, or with Loader(copy=False) a view of the
    Loader's ring buffer valid until the next batch, as in the tuple API --,
    "label" (B,) int64, "index" (B,) uint64 sample indices (int64 in torch), and per served field
    `name`: fixed kinds stacked -- mask (B, H, W) transformed with the image, scalar (B,), array
    (B, *shape) --; variable kinds flat -- boxes (sum n, 4) float32 in the served image's
    pixels, rows (sum n, *shape), text/bytes (sum of lengths,) uint8 -- with
    `name + "_offsets"` (B + 1,) int64: sample k's rows are [offsets[k], offsets[k + 1]).
    Field arrays and labels are the batch's own (handed over with the images, or copies with
    copy=False); keeping them is safe.

    .fields: {name: dscache field spec} of the fields served, in selection order. It belongs to
    the batch's class (one subclass of Batch per field selection), so that a batch rebuilt the
    way torch rebuilds a mapping -- type(batch)({...}) in default_convert, default_collate and
    pin_memory, copy.copy, pickling to the DataLoader's main process -- keeps it.
    """

    fields = {}

    def per_sample(self, name):
        """Field `name` as a list of B per-sample values (see dscache.per_sample)."""
        return per_sample(self, name)

    def __reduce__(self):
        return _rebuild, (tuple(self.fields.items()), dict(self))


_types = {}  # tuple of (name, spec): the Batch subclass whose .fields they are


def _batch_type(specs):
    """The Batch subclass carrying field specs `specs` ({name: spec}), one per selection."""
    key = tuple(specs.items())
    cls = _types.get(key)
    if cls is None:
        cls = _types.setdefault(key, type("Batch", (Batch,), {
            "fields": dict(specs), "__doc__": Batch.__doc__, "__qualname__": "Batch"}))
    return cls


def _rebuild(spec_items, items):
    """Unpickles a Batch (Batch.__reduce__)."""
    return _batch_type(dict(spec_items))(items)


def _is_torch(x):
    return type(x).__module__.split(".")[0] == "torch"


def _batch_size(batch):
    return len(batch["label"])


_RESERVED = ("image", "label", "index")


def _field(batch, name, who):
    """(spec, or None when `batch` is a plain mapping without specs, and whether the field is
    variable) of field `name` of a batch; InvalidArgumentError naming what the batch holds.
    A plain dict (a collate_fn of one's own rebuilt the batch) is read from its keys: a field
    with a `name + "_offsets"` key is variable."""
    fields = batch.fields if isinstance(batch, Batch) else {}
    spec = fields.get(name)
    if spec is not None:
        return spec, spec.variable
    if not fields and isinstance(batch, Mapping) and name in batch and \
            name not in _RESERVED and not name.endswith("_offsets"):
        return None, name + "_offsets" in batch
    if fields:
        served = ", ".join(fields)
    elif isinstance(batch, Mapping):
        served = ", ".join(k for k in batch if k not in _RESERVED and
                           not (k.endswith("_offsets") and k[:-len("_offsets")] in batch))
    else:
        served = f"none (a {type(batch).__name__}, not a batch dict)"
    raise _invalid(f"{who}: field '{name}' is not in the batch (its fields: {served or 'none'})")


def per_sample(batch, name):
    """Field `name` of a Batch as a list of B per-sample values: a fixed kind's rows of the
    stacked array; a variable kind's slices of the flat array ((n, 4) boxes, (n, *shape) rows);
    text decoded to str, bytes to bytes. Views of the batch's arrays (numpy or torch). A plain
    dict of a batch's arrays works too, from its keys (a field with `name + "_offsets"` is cut
    by them), text and bytes then staying uint8 arrays."""
    spec, variable = _field(batch, name, "per_sample")
    values = batch[name]
    n = _batch_size(batch)
    if not variable:
        return [values[k] for k in range(n)]
    offsets = batch[name + "_offsets"]
    o = offsets.tolist()
    parts = [values[o[k]:o[k + 1]] for k in range(n)]
    if spec is not None and spec.kind in ("text", "bytes"):
        raw = [bytes(p.numpy()) if _is_torch(p) else p.tobytes() for p in parts]
        return [r.decode("utf-8") for r in raw] if spec.kind == "text" else raw
    return parts


def detection_targets(batch, boxes="boxes", labels="box_labels"):
    """The per-sample targets torchvision's detection models take (fasterrcnn_*, retinanet_*,
    ...): a list of B dicts {"boxes": (n, 4) float32 x1 y1 x2 y2 in the served image's pixels,
    "labels": (n,) int64}, from a Batch's boxes field and a rows field with one class per box
    (rows_of=boxes; labels=None leaves "labels" out). numpy arrays, or torch tensors when the
    batch is torch's (Loader.torch(), DataLoader(CacheDataset(...))): move them to the model's
    device with the images. A plain dict of a batch's arrays works too."""
    box_list = per_sample(batch, boxes)
    if labels is None:
        return [{"boxes": b} for b in box_list]
    try:
        spec, variable = _field(batch, labels, "detection_targets")
    except InvalidArgumentError:
        spec, variable = None, False
    if spec is not None:
        ok = spec.kind == "rows" and spec.shape in ((), (1,))
    else:  # a plain dict: judged by the arrays
        ok = variable and tuple(batch[labels].shape[1:]) in ((), (1,))
    if not ok:
        got = repr(spec) if spec is not None else (
            f"an array of shape {tuple(batch[labels].shape)}" if labels in batch else "nothing")
        raise _invalid(f"detection_targets: labels '{labels}' must be a rows field with one "
                       f"value a row (Rows(dtype, rows_of='{boxes}')), got {got}")
    out = []
    for k, (b, lab) in enumerate(zip(box_list, per_sample(batch, labels))):
        if len(lab) != len(b):
            raise _invalid(f"detection_targets: sample {k} has {len(b)} boxes in '{boxes}' and "
                           f"{len(lab)} rows in '{labels}' (declare it rows_of='{boxes}')")
        if _is_torch(lab):
            import torch
            lab = lab.reshape(-1).to(torch.int64)
        else:
            lab = lab.reshape(-1).astype(np.int64)
        out.append({"boxes": b, "labels": lab})
    return out


def to_torch(batch, device=None, non_blocking=False, pin=False):
    """The Batch with every array a torch.Tensor made with torch.from_numpy (sharing memory
    with the numpy batch: a view image keeps its ring-buffer lifetime); uint64 indices as int64;
    a uint16 mask as int32 where this torch has no uint16. Copied into page-locked memory when
    `pin`, then moved to `device` when given."""
    import torch

    def tensor(a):
        if a.dtype == np.uint64:  # torch has no uint64 before 2.3 (indices are < 2**63)
            a = a.view(np.int64)
        try:
            t = torch.from_numpy(a)
        except TypeError:  # uint16 before torch 2.3
            t = torch.from_numpy(a.astype(np.int32))
        if pin:
            t = t.pin_memory()
        if device is not None:
            t = t.to(device, non_blocking=non_blocking)
        return t

    return type(batch)({k: tensor(v) for k, v in batch.items()})


def make_batch(images, labels, indices, fields, specs):
    """The Batch of one Loader.next() (the binding's tuple)."""
    b = _batch_type(specs)(image=images, label=labels, index=indices)
    for name, values, offsets in fields:
        b[name] = values
        if offsets is not None:
            b[name + "_offsets"] = offsets
    return b
