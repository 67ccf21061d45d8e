"""Device tensors the ops build from host data once and keep: attention's causal bias, cross entropy's
class positions, the positions along a dim that gather's gradient compares its indices with.

An upload from the host at every call would wait for the GPU (the runtime's copies from the host
synchronize), so an op that needs a fixed tensor of its shape asks `kept` for it: made on the first
call of a key and device, then the same tensor, with the oldest of a cache's `KEEP` entries dropped.

Example:
    >>> cache = {}
    >>> a = kept(cache, ("positions", 3), lambda: np.arange(3), ember.Device.cpu())
    >>> kept(cache, ("positions", 3), lambda: np.arange(3), ember.Device.cpu()) is a
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

if TYPE_CHECKING:
    from ..tensor import Tensor

KEEP = 4
"""Entries a cache keeps (a few shapes at once: a model's sequence lengths, its vocabularies)."""


def kept(cache: dict, key: tuple, host: Callable[[], np.ndarray], device) -> Tensor:
    """The tensor of `host()` on `device`, made once per (`key`, `device`) in `cache` and kept."""
    full = (*key, device)
    found = cache.get(full)
    if found is None:
        from ..api.creation import tensor
        found = tensor(host(), device=device)
        if len(cache) >= KEEP:
            cache.pop(next(iter(cache)))
        cache[full] = found
    return found
