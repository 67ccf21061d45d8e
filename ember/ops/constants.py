"""Device tensors the ops build from host data once and keep: attention's causal bias, cross entropy's
class positions, the positions along a dim that gather's gradient compares its indices with.

An upload from the host at every call would wait for the GPU (the runtime's copies from the host
synchronize), so an op that needs a fixed tensor of its shape asks `kept` for it: made on the first
call of a key and device, then the same tensor, with the oldest of a cache's `KEEP` entries dropped.
It is made through a tensor at hand (`like.new_tensor`), so this package imports no tensor layer.

Example:
    >>> cache, x = {}, ember.zeros(2)
    >>> a = kept(cache, ("positions", 3), lambda: np.arange(3), x)
    >>> kept(cache, ("positions", 3), lambda: np.arange(3), x) is a
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

if TYPE_CHECKING:
    from ..tensor import Tensor

KEEP = 4
"""Entries a cache keeps (a few shapes at once: a model's sequence lengths, its vocabularies)."""


def kept(cache: dict, key: tuple, host: Callable[[], np.ndarray], like: Tensor) -> Tensor:
    """The tensor of `host()` (of its dtype) on the device of `like`, made once per (`key`, device) in
    `cache` and kept."""
    full = (*key, like.device)
    found = cache.get(full)
    if found is None:
        array = host()
        found = like.new_tensor(array, dtype=array.dtype)
        if len(cache) >= KEEP:
            cache.pop(next(iter(cache)))
        cache[full] = found
    return found
