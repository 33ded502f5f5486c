"""Elastic resume of saved positions: a state's global cursor G, the samples of the epoch's
global order all ranks together had taken, so that a state saved at one world size, batch size
or worker count resumes at another (docs/SERVING.md "Changing the number of ranks"). G is a
version-3 state's "sample"; an older state's is derived from its own geometry. The arithmetic is
libcache's (dscache/loader.h epoch_sample and rank_batch_at), bound in _dscache."""
from . import _dscache
from ._checks import _U32, _U64, _check_int, _invalid


def state_sample(state, count, rank_tail):
    """G of `state`, a position in an epoch of `count` samples: its "sample" when it has one,
    else that of a rank which took its cursor's batches (batch_stride and batch_offset mapping a
    strided Loader's cursor to the rank's batches): cursor batches x batch_size x world_size, or
    `count` once that rank's epoch was done. rank_tail: "pad" or "drop", the state's."""
    if state.get("sample") is not None:
        return _check_int("state_dict sample", state["sample"], 0, count)
    bs = _check_int("state_dict batch_size", state.get("batch_size"), 1, _U32)
    world = _check_int("state_dict world_size", state.get("world_size"), 1, _U32)
    stride = _check_int("state_dict batch_stride", state.get("batch_stride", 1), 1, _U32)
    offset = _check_int("state_dict batch_offset", state.get("batch_offset", 0), 0, _U32)
    cursor = _check_int("state_dict cursor", state.get("cursor"), 0, _U64)
    return _dscache.epoch_sample(count, world, rank_tail, bs, bool(state.get("drop_last")),
                                 min(offset + cursor * stride, _U64))


def with_sample(state, rank_tail):
    """`state` (with "data", the source's identity) with "sample" (G) and "epoch_samples" (the
    epoch's samples) added."""
    count = state["data"]["count"]
    state.update(sample=None, epoch_samples=count)
    state["sample"] = state_sample(state, count, rank_tail)
    return state


def rank_cursor(state, count, rank_tail, mine):
    """The rank batch a rank of `mine`'s geometry (its batch_size, world_size and drop_last;
    rank_tail the same as the state's) resumes `state` at: G / (batch_size x world_size), or the
    rank's batches per epoch when G is the epoch's end. InvalidArgumentError with the numbers
    when G is not a multiple of batch_size x world_size."""
    return _dscache.rank_batch_at(count, mine["world_size"], rank_tail, mine["batch_size"],
                                  mine["drop_last"], state_sample(state, count, rank_tail))


def check_same(state, mine, keys):
    """InvalidArgumentError naming the first of `keys` whose value in `state` is not `mine`'s."""
    for key in keys:
        if state.get(key) != mine[key]:
            raise _invalid(f"state_dict: {key} was {state.get(key)!r}, this dataset has "
                           f"{mine[key]!r}")
