"""dscache.Mixture: several caches served as one (libcache's Mixture, dscache/mixture.h), each
with its share of an epoch, labels unified by class name; and a mixture's part of the positions
dscache.Loader and dscache.torch.CacheDataset save (docs/PYTHON.md "Mixing caches")."""
import collections
import hashlib
import os

from . import Cache, _dscache, _elastic, _Source
from ._checks import _U32, _U64, _check_float, _check_int, _check_str, _invalid, _sample_index
from ._errors import InvalidArgumentError

MixtureSource = collections.namedtuple("MixtureSource", "name cache weight repeat")
MixtureSource.__doc__ = """One source of a Mixture: its name, its dscache.Cache, and its share
as given (weight or repeat; the other None)."""


def _shares(what, values, k):
    """A list of k floats (InvalidArgumentError naming `what` when not k numbers), or None."""
    if values is None:
        return None
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise _invalid(f"Mixture {what}: must be a list of {k} numbers (one per source), got "
                       f"{values!r}")
    if len(values) != k:
        raise _invalid(f"Mixture {what}: {len(values)} values for {k} sources")
    return [_check_float(f"Mixture {what}[{j}]", v) for j, v in enumerate(values)]


def _names(what, values, k):
    """A list of strs (k of them when k is not None), or None."""
    if values is None:
        return None
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise _invalid(f"Mixture {what}: must be a list of strs, got {values!r}")
    if k is not None and len(values) != k:
        raise _invalid(f"Mixture {what}: {len(values)} names for {k} sources")
    return [_check_str(f"Mixture {what}[{j}]", v) for j, v in enumerate(values)]


class Mixture(_Source):
    """Several caches served as one: dscache.Loader(mixture, ...) and
    dscache.torch.CacheDataset(mixture, ...) take it wherever they take a Cache.

    sources: dscache.Cache objects (or paths, opened with the defaults). Shares: weights (an
    epoch of epoch_samples samples, default the sum of the sources' sizes, split by Hamilton's
    largest remainder), or repeat (source k gives round(size_k x repeat_k) samples an epoch),
    not both; neither = repeat 1 each (every sample once). No sample repeats within a pass over
    its source, across epochs too. batching: "random" (one shuffle of the epoch's mixed
    sequence) or "stratified" (every global batch of global_batch samples holds each source's
    share, floor or ceil; default global_batch: the Loader's batch_size x world_size -- give it
    where the world size may change). names: one per source (default "source0", ...), unique.
    classes: the unified class list (default: the first source's class names in order, then
    each later source's new names); labels are served as indices into it.

    The sources must agree (channels, fields, JPEG or not, classes present or not): a
    difference is an InvalidArgumentError listing each by source name. Sources of different
    sizes make the mixture ragged (a Loader then needs a crop to one size).

    len() and m[i] are the concatenation of the sources (i in source order; the label unified);
    .locate(i) is (source, index in it). Batches of a Loader over a mixture are dscache.Batch
    dicts with "source" (B,) uint32 beside "index" (B,), the index within that source.
    Immutable and thread-safe. Picklable: its caches travel as they do (reopened and checked in
    the receiving process), so it goes to DataLoader workers.
    """

    def __init__(self, sources, weights=None, repeat=None, epoch_samples=None,
                 batching="random", global_batch=None, names=None, classes=None):
        if isinstance(sources, (str, bytes, os.PathLike, Cache)) or \
                not hasattr(sources, "__iter__"):
            raise TypeError(f"Mixture sources: must be a list of dscache.Cache objects or "
                            f"paths, got {sources!r}")
        caches = []
        for j, s in enumerate(sources):
            if isinstance(s, (str, os.PathLike)):
                s = Cache(s)
            elif not isinstance(s, Cache):
                raise TypeError(f"Mixture sources[{j}]: must be a dscache.Cache or a path, got "
                                f"{s!r}")
            caches.append(s)
        k = len(caches)
        if k == 0:
            raise _invalid("Mixture sources: at least one cache is needed")
        if weights is not None and repeat is not None:
            raise _invalid("Mixture: give weights or repeat, not both")
        weights, repeat = _shares("weights", weights, k), _shares("repeat", repeat, k)
        names = _names("names", names, k)
        classes = _names("classes", classes, None)
        _check_str("Mixture batching", batching)
        e = 0 if epoch_samples is None else _check_int("Mixture epoch_samples", epoch_samples,
                                                       1, _U64)
        g = 0 if global_batch is None else _check_int("Mixture global_batch", global_batch,
                                                      1, _U64)
        args = [(c._src, c.classes, "" if names is None else names[j],
                 c._identity()["digest"], -1.0 if weights is None else weights[j],
                 -1.0 if repeat is None else repeat[j]) for j, c in enumerate(caches)]
        self._mix = _dscache.Mixture(args, batching, e, g, classes or [])
        self._src = self._mix.view()
        self._caches = caches
        self._given = (weights, repeat, epoch_samples, batching, global_batch, names, classes)

    classes = property(lambda self: list(self._mix.classes), doc="the unified class names")
    counts = property(lambda self: list(self._mix.counts),
                      doc="samples each source gives an epoch, in source order")
    epoch_samples = property(lambda self: self._mix.epoch_samples, doc="samples an epoch")
    batching = property(lambda self: self._mix.batching, doc='"random" or "stratified"')
    global_batch = property(lambda self: self._mix.stratum or None,
                            doc="stratified: samples a global batch; None: the Loader's")
    names = property(lambda self: list(self._mix.names), doc="the sources' names")

    @property
    def sources(self):
        """[MixtureSource(name, cache, weight, repeat)], in source order."""
        weights, repeat = self._given[:2]
        return [MixtureSource(n, c, None if weights is None else weights[j],
                              None if repeat is None else repeat[j])
                for j, (n, c) in enumerate(zip(self._mix.names, self._caches))]

    @property
    def fields(self):
        """The sources' fields (the same for every source)."""
        return self._caches[0].fields

    def locate(self, i):
        """(source, index within that source) of mixture index i (m[i] is that sample)."""
        return tuple(self._mix.locate(_sample_index(i, len(self))))

    def _identity(self):
        """The sources (names, contents) for state_dict(): a position resumes only on them.
        "shares" says the weights, epoch and batching (CacheDataset resumes only under the same;
        a Loader's state carries them in "mix", checked by libcache)."""
        parts = [(n, c._identity()) for n, c in zip(self._mix.names, self._caches)]
        digest = hashlib.sha256(repr(parts).encode()).hexdigest()[:16]
        shares = (f"{self._mix.describe_shares()}; {self.epoch_samples} samples an epoch, "
                  f"{self.batching}" + (f" {self._mix.stratum}" if self._mix.stratum else ""))
        return {"kind": "mixture", "count": len(self), "digest": digest, "shares": shares}

    def __reduce__(self):
        return (Mixture, (list(self._caches),) + self._given)

    def __repr__(self):
        return (f"dscache.Mixture({self._mix.describe_shares()}: {len(self)} samples, "
                f"{self.epoch_samples} an epoch, {self.batching})")


def open_source(path, memory):
    """CacheDataset's data in this process: a Mixture as it is (pickled to a worker, its caches
    reopen there), else the Cache at `path`."""
    return path if isinstance(path, Mixture) else Cache(path, memory=memory)


def epoch_samples(source):
    """The samples of an epoch of `source`: a Mixture's epoch_samples, a cache's count."""
    return source.epoch_samples if isinstance(source, Mixture) else len(source)


# ---- positions ---------------------------------------------------------------------------


def _state_mix(mixture, mix):
    """The binding's MixState dict as a state's "mix": per source its name, size, share and
    stream positions; the fingerprint as 16 hex digits (JSON-safe)."""
    weights, repeat = mixture._given[:2]
    sources = [dict(name=n, size=len(c), weight=None if weights is None else weights[j],
                    repeat=None if repeat is None else repeat[j], segment_drawn=int(sd),
                    drawn=int(d), taken=int(t))
               for j, (n, c, sd, d, t) in enumerate(zip(
                   mixture._mix.names, mixture._caches, mix["segment_drawn"], mix["drawn"],
                   mix["taken"]))]
    return {"fingerprint": f"{mix['fingerprint']:016x}", "segment": int(mix["segment"]),
            "segment_start": int(mix["segment_start"]), "batching": mixture.batching,
            "epoch_samples": mixture.epoch_samples, "sources": sources}


def _binding_mix(mixture, state_mix):
    """A state's "mix" as the binding's MixState dict, checked (InvalidArgumentError naming the
    key); its sources must be this mixture's, by name and in order."""
    if not isinstance(state_mix, dict) or not isinstance(state_mix.get("sources"), list):
        raise _invalid(f"state_dict mix: must be a dict with 'sources', got {state_mix!r}")
    names = [s.get("name") if isinstance(s, dict) else None for s in state_mix["sources"]]
    if names != mixture.names:
        raise _invalid(f"state_dict mix: saved on sources {names}, this mixture's are "
                       f"{mixture.names}")
    given = state_mix.get("fingerprint")
    # Exactly what _state_mix writes: int() alone would take an int's decimal digits as hex.
    if not isinstance(given, str) or len(given) != 16 or \
            any(c not in "0123456789abcdefABCDEF" for c in given):
        raise _invalid(f"state_dict mix fingerprint: {given!r} is not 16 hex digits")
    fingerprint = int(given, 16)
    out = {"fingerprint": _check_int("state_dict mix fingerprint", fingerprint, 0, _U64),
           "segment": _check_int("state_dict mix segment", state_mix.get("segment"), 0, _U32),
           "segment_start": _check_int("state_dict mix segment_start",
                                       state_mix.get("segment_start"), 0, _U64)}
    for key in ("segment_drawn", "drawn", "taken"):
        out[key] = [_check_int(f"state_dict mix sources[{j}] {key}", s.get(key), 0, _U64)
                    for j, s in enumerate(state_mix["sources"])]
    return out


def _next_epoch(mix):
    """The MixState where the epoch after one finished at `mix` starts: the streams go on from
    where the finished epoch left them."""
    return dict(mix, segment=0, segment_start=0, segment_drawn=list(mix["drawn"]),
                taken=[0] * len(mix["drawn"]))


def _pure_start(loader, epoch):
    """The MixState at the start of `epoch` of a Loader whose shares never changed."""
    m = loader.cache._mix
    # The stratum the fingerprint covers: MixtureOptions::stratum, 0 = the Loader's global batch.
    stratum = m.stratum or loader.batch_size * loader.world_size
    drawn = list(m.pure_drawn(epoch))
    return {"fingerprint": m.fingerprint(stratum), "segment": 0, "segment_start": 0,
            "segment_drawn": drawn, "drawn": drawn, "taken": [0] * len(drawn)}


def loader_state(loader, state):
    """dscache.Loader.state_dict()'s state over a Mixture: its "epoch", "sample" (G),
    "epoch_samples" and "mix" set from the C++ Loader's position after the last batch taken (the
    next epoch's start once an epoch is finished)."""
    impl, n = loader._impl, loader.cache.epoch_samples
    if loader._active or loader._positioned:
        seed, epoch, sample, mix = impl.epoch_position()
    elif loader._ran and tuple(impl.epoch_position()[1:3]) == (loader._epoch - 1, n):
        seed, epoch, sample, mix = impl.epoch_position()
    elif not loader._moved:
        seed, epoch, sample, mix = loader.seed, loader._epoch, 0, _pure_start(loader, loader._epoch)
    else:  # set_epoch() after a resume under other shares: the C++ Loader knows its streams
        impl.start_epoch(loader.seed, loader._epoch)
        loader._positioned = True
        seed, epoch, sample, mix = impl.epoch_position()
    if sample >= n:
        epoch, sample, mix = epoch + 1, 0, _next_epoch(mix)
    state.update(seed=int(seed), epoch=int(epoch), sample=int(sample), epoch_samples=n,
                 mix=_state_mix(loader.cache, mix))
    if sample == 0:
        state["cursor"] = 0
    return state


def resume_loader(loader, state, seed, epoch, allow_new_weights):
    """dscache.Loader.load_state_dict() of a state with a mixture position: the C++ Loader
    resumes it now (libcache refuses a position saved under other shares unless
    allow_new_weights, WeightChange::kContinue, with its message); the next iteration serves
    the rest of that epoch, or the next one when it was finished."""
    sample = _check_int("state_dict sample", state.get("sample"), 0, _U64)
    mix = _binding_mix(loader.cache, state["mix"])
    pure = _pure_start(loader, epoch)  # else later epochs continue a segmented one's streams
    try:
        loader._impl.resume(seed, epoch, sample, mix, bool(allow_new_weights))
    except InvalidArgumentError as e:
        if allow_new_weights or mix["fingerprint"] == pure["fingerprint"]:
            raise
        # libcache's message, with the state's shares and the keyword that continues it.
        old = ", ".join(f"{s.get('name')} " + (f"{s.get('weight')}" if s.get("repeat") is None
                                                else f"repeat {s.get('repeat')}")
                        for s in state["mix"]["sources"])
        hint = (f" (the state's shares: {old}; load_state_dict(state, allow_new_weights=True) "
                f"is WeightChange::kContinue)")
        raise InvalidArgumentError(str(e) + hint, e.path, e.reason + hint) from None
    loader._ran = True
    loader._moved = loader._moved or any(mix[k] != pure[k] for k in ("fingerprint", "segment",
                                                                     "segment_drawn"))
    loader.seed, loader._pending, loader._generation = seed, None, loader._generation + 1
    done = loader._impl.epoch_position()[2] >= loader.cache.epoch_samples
    loader._epoch = epoch + 1 if done else epoch
    loader._active = loader._positioned = not done


def _pure_position(ds, mixture, seed, epoch, cursor):
    """The MixState of CacheDataset `ds`'s rank at its batch `cursor` of `epoch`: a Loader of its
    geometry (no threads, nothing read) restored there, in the pure order its workers serve."""
    from ._loader import Loader
    probe = Loader(mixture, **dict(ds._loader_kwargs, workers=0, prefetch=1, seed=0))
    probe._impl.restore(seed, epoch, cursor)
    return probe._impl.epoch_position()[3]


def dataset_state(ds, state):
    """CacheDataset's rank state with "sample" (G) and "epoch_samples"; over a Mixture also
    "mix", its position in the mixed epoch."""
    source = ds._cache()
    if not isinstance(source, Mixture):
        return _elastic.with_sample(state, ds.rank_tail)
    mix = _pure_position(ds, source, state["seed"], state["epoch"], state["cursor"])
    state.update(sample=None, epoch_samples=source.epoch_samples)
    state["sample"] = _elastic.state_sample(state, source.epoch_samples, ds.rank_tail)
    state["mix"] = _state_mix(source, mix)
    return state


def dataset_cursor(ds, state, mine):
    """The rank batch CacheDataset `ds` resumes a rank state at (_elastic.rank_cursor). Over a
    Mixture the state's "mix" must be the pure order's position there (its workers serve the
    epochs of shares that never changed): a state whose epoch continued under other shares
    (dscache.Loader's allow_new_weights) is refused by name."""
    source = ds._cache()
    cursor = _elastic.rank_cursor(state, epoch_samples(source), ds.rank_tail, mine)
    if isinstance(source, Mixture):
        seed, epoch = state.get("seed"), state.get("epoch")
        want = _state_mix(source, _pure_position(ds, source, seed, epoch, cursor))
        if state.get("mix") != want:
            raise _invalid(f"state_dict: the mixture's position ({state.get('mix')!r}) is not "
                           f"epoch {epoch}'s under the shares it was saved with (the weights "
                           f"changed within or before it): CacheDataset serves epochs whose "
                           f"shares never changed; resume this state with dscache.Loader")
    return cursor
