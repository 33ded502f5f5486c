# Stubs of dscache.torch (python/dscache/torch.py): a cache as torch.utils.data datasets.
import os
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple, Union

import torch
import torch.utils.data

from . import Batch, Mixture, Transform

_Path = Union[str, "os.PathLike[str]"]

class CacheDataset(torch.utils.data.IterableDataset):
    path: Union[str, Mixture]
    batch_size: int
    drop_last: bool
    rank: int
    world_size: int
    def __init__(self, path: Union[_Path, Mixture], batch_size: int = ...,
                 shuffle: Union[bool, str] = ...,
                 seed: int = ..., drop_last: bool = ..., transform: Optional[Transform] = ...,
                 fields: Optional[Sequence[str]] = ..., threads: int = ..., prefetch: int = ...,
                 rank: Optional[int] = ..., world_size: Optional[int] = ...,
                 rank_tail: str = ..., memory: str = ..., block: int = ...,
                 window_blocks: int = ..., block_bytes: int = ..., window_bytes: int = ...,
                 min_box_visibility: float = ..., shared_ring: bool = ...,
                 direct_read: Union[bool, str] = ...) -> None: ...
    def __len__(self) -> int: ...
    # (images (B, H, W, C) uint8, labels (B,) int64), or a Batch of tensors (cache with fields)
    def __iter__(self) -> Iterator[Union[Tuple[torch.Tensor, torch.Tensor], Batch]]: ...
    def set_epoch(self, epoch: int) -> None: ...
    @property
    def epoch(self) -> int: ...
    @property
    def seed(self) -> int: ...
    def state_dict(self, batches: Optional[int] = ...) -> Dict[str, Any]: ...
    def load_state_dict(self, state: Dict[str, Any]) -> None: ...

class CacheMapDataset(torch.utils.data.Dataset):
    path: str
    fields: Sequence[str]
    def __init__(self, path: _Path, transform: Optional[Any] = ...,
                 fields: Optional[Sequence[str]] = ..., memory: str = ...) -> None: ...
    def __len__(self) -> int: ...
    # (image (H, W, C) uint8, label int64), or a dict with "index" and fields (cache with fields)
    def __getitem__(self, i: int) -> Union[Tuple[torch.Tensor, torch.Tensor],
                                           Dict[str, Any]]: ...
