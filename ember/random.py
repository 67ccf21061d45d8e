"""Reproducible random streams, one per device.

A stream is a seed and a counter. Each random op takes the next block of counter values, so random
primitives are pure functions of `(seed, offset, shape)`: the same seed gives the same numbers on a
device whatever else runs, and threads drawing at once never share a block. A device and its autodiff
variant share one stream. The default seed is 0, so a fresh process is reproducible, as in PyTorch.

Example:
    >>> ember.seed(42)
    >>> a = ember.rand(3)
    >>> ember.seed(42)
    >>> bool((ember.rand(3) == a).all())
    True
"""

from __future__ import annotations

import threading

_DEFAULT_SEED = 0


class Stream:
    """One device's random stream; `take(n)` reserves `n` counter values and returns (seed, offset)."""

    __slots__ = ("seed", "offset", "_lock")

    def __init__(self, seed: int) -> None:
        self._lock = threading.Lock()
        self.seed = seed
        self.offset = 0

    def reset(self, seed: int) -> None:
        if not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        with self._lock:
            self.seed, self.offset = seed, 0

    def take(self, count: int) -> tuple[int, int]:
        # One counter value yields four 64-bit draws; reserving count + 1 values leaves room for the
        # rejection steps of normal sampling, so consecutive ops never overlap.
        with self._lock:
            offset = self.offset
            self.offset += count + 1
            return self.seed, offset

    def state(self) -> tuple[int, int]:
        return self.seed, self.offset

    def set_state(self, state: tuple[int, int]) -> None:
        with self._lock:
            self.seed, self.offset = state


_streams: dict = {}  # the registry of streams, by device without autodiff
_global_seed = _DEFAULT_SEED
_lock = threading.Lock()


def stream_of(device) -> Stream:
    """The random stream of `device` (created on first use from the global seed)."""
    key = device.inner
    stream = _streams.get(key)
    if stream is None:
        with _lock:
            stream = _streams.setdefault(key, Stream(_global_seed))
    return stream


def seed(value: int) -> None:
    """Seed every device's random stream (existing and future) with `value`.

    Example:
        >>> ember.seed(0)
    """
    global _global_seed
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"seed must be a non-negative int, got {value!r}")
    with _lock:
        _global_seed = value
        streams = list(_streams.values())
    for stream in streams:
        stream.reset(value)


def get_state() -> dict:
    """The state of every stream, to save in a checkpoint (`set_state` restores it)."""
    return {"seed": _global_seed,
            "streams": {f"{d.kind}:{d.index}": list(s.state()) for d, s in _streams.items()}}


def set_state(state: dict) -> None:
    """Restore what `get_state` returned."""
    from .device import Device
    global _global_seed
    _global_seed = state["seed"]
    for name, st in state["streams"].items():
        kind, index = name.split(":")
        stream_of(Device._get(kind, int(index), False, None)).set_state((st[0], st[1]))
