"""Reproducible random streams, one per device, and what their numbers are.

A stream is a seed and a counter. Each random op takes the next block of counter values, so random
primitives are pure functions of `(seed, offset, shape)`: the same seed gives the same numbers on a
device whatever else runs, and threads drawing at once never share a block. A device and its autodiff
variant share one stream. The default seed is 0, so a fresh process is reproducible, as in PyTorch.

The numbers are the same on every backend: block b of stream (seed, offset) is Philox4x32-10 of
counter (offset + b as two u32, 0, 0) with key (seed as two u32). The functions below are the NumPy
definition (the NumPy backend runs them; the cube kernels of `ember/kernels/random.py` compute the
same): 32-bit draws (`words`, element j is word j % 4 of block j // 4) make f32/f16/bf16 uniform and
normal numbers; 64-bit draws (`words64`, two words joined) make f64 uniform and normal numbers and
integers (`randint`). The formulas for each: docs/architecture.md, "Random numbers".

Bits, integers and uniform [0, 1) are equal bit for bit across backends. Other uniform ranges may
differ in the last bit where a compiler fuses the multiply-add (FMA), and normal numbers by the few
ulps in which math libraries' log/sin/cos differ.

Example:
    >>> ember.seed(42)
    >>> a = ember.rand(3)
    >>> ember.seed(42)
    >>> bool((ember.rand(3) == a).all())
    True
"""

from __future__ import annotations

import threading

import numpy as np

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
        # One counter value (a Philox block) yields four 32-bit or two 64-bit draws, so count + 1 values
        # cover any op of `count` elements and consecutive ops never overlap.
        with self._lock:
            offset = self.offset
            self.offset += count + 1
            return self.seed, offset

    def state(self) -> tuple[int, int]:
        return self.seed, self.offset

    def set_state(self, state: tuple[int, int]) -> None:
        with self._lock:
            self.seed, self.offset = state


_streams: dict[tuple[str, int], Stream] = {}  # the registry of streams, by device (kind, index)
_global_seed = _DEFAULT_SEED
_lock = threading.Lock()


def stream_of(device) -> Stream:
    """The random stream of `device` and its autodiff variant (created on first use from the global seed)."""
    return _stream_at((device.kind, device.index))


def _stream_at(key: tuple[str, int]) -> Stream:
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
            "streams": {f"{kind}:{index}": list(s.state()) for (kind, index), s in _streams.items()}}


def set_state(state: dict) -> None:
    """Restore what `get_state` returned."""
    global _global_seed
    _global_seed = state["seed"]
    for name, st in state["streams"].items():
        kind, index = name.rsplit(":", 1)  # a torch device's kind holds a colon: "torch:cuda:0"
        _stream_at((kind, int(index))).set_state((st[0], st[1]))


# ---- the numbers: Philox4x32-10 and the distributions built on it -------------------------------

M0, M1 = 0xD2511F53, 0xCD9E8D57          # round multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85          # key schedule (golden ratio, sqrt(3) - 1)
ROUNDS = 10
_MASK64 = (1 << 64) - 1


def split64(x: int) -> tuple[int, int]:
    """A 64-bit value (taken mod 2**64) as (low u32, high u32)."""
    x &= _MASK64
    return x & 0xFFFFFFFF, x >> 32


def philox4x32(counters: np.ndarray, key: tuple) -> np.ndarray:
    """Philox4x32-10 of each row of `counters` (shape (n, 4), u32) with `key` (k0, k1): (n, 4) u32.

    Example:
        >>> philox4x32(np.zeros((1, 4), np.uint32), (0, 0))[0].tolist() == \\
        ...     [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
        True
    """
    c = [counters[:, j].astype(np.uint64) for j in range(4)]
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    mask = np.uint64(0xFFFFFFFF)
    for _ in range(ROUNDS):
        p0 = c[0] * np.uint64(M0)
        p1 = c[2] * np.uint64(M1)
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & mask, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & mask]
        k0, k1 = (k0 + np.uint64(W0)) & mask, (k1 + np.uint64(W1)) & mask
    return np.stack(c, axis=1).astype(np.uint32)


def _blocks(count: int, seed: int, offset: int) -> np.ndarray:
    """Blocks offset .. offset + count - 1 of stream `seed`: (count, 4) u32."""
    index = np.arange(count, dtype=np.uint64) + np.uint64(offset & _MASK64)  # wraps mod 2**64
    counters = np.zeros((count, 4), np.uint32)
    counters[:, 0] = (index & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    counters[:, 1] = (index >> np.uint64(32)).astype(np.uint32)
    return philox4x32(counters, split64(seed))


def words(n: int, seed: int, offset: int = 0) -> np.ndarray:
    """The first `n` 32-bit draws (u32) of stream (seed, offset).

    Example:
        >>> words(3, seed=0).dtype
        dtype('uint32')
    """
    return _blocks(-(-n // 4), seed, offset).reshape(-1)[:n]


def words64(n: int, seed: int, offset: int = 0) -> np.ndarray:
    """The first `n` 64-bit draws (u64) of stream (seed, offset): word pairs (0, 1) and (2, 3) of blocks."""
    w = _blocks(-(-n // 2), seed, offset).astype(np.uint64).reshape(-1, 2)
    return ((w[:, 0] << np.uint64(32)) | w[:, 1])[:n]


def _below(high: float, dtype: np.dtype, wide: bool) -> np.ndarray:
    """The largest value of `dtype` below `high` (the clamp that keeps uniform draws in [low, high))."""
    top = np.asarray(high, dtype)
    if float(top) < high:
        return top
    if wide:
        return np.nextafter(top, -np.inf)
    kind = {2: np.uint16, 4: np.uint32}[dtype.itemsize]  # bit arithmetic: works for bf16 too
    bits = top.view(kind)
    if float(top) > 0:
        return (bits - kind(1)).view(dtype)
    if float(top) == 0:
        return np.asarray(1 << (8 * dtype.itemsize - 1) | 1, kind).view(dtype)
    return (bits + kind(1)).view(dtype)


def uniform_top(high: float, low: float, dtype) -> float:
    """What uniform draws of `dtype` are clamped to: the largest value below `high` (inf if high <= low).

    Example:
        >>> uniform_top(1.0, 0.0, np.float32) == float(np.nextafter(np.float32(1), np.float32(0)))
        True
    """
    dtype = np.dtype(dtype)
    return float(_below(high, dtype, dtype.itemsize == 8)) if high > low else float("inf")


def uniform(shape: tuple, dtype, low: float, high: float, seed: int, offset: int) -> np.ndarray:
    """Uniform draws in [low, high) of a float `dtype` (see the module docstring for the formula).

    Example:
        >>> u = uniform((1000,), np.float32, 0.0, 1.0, seed=1, offset=0)
        >>> bool(u.min() >= 0 and u.max() < 1)
        True
    """
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    top = uniform_top(high, low, dtype)
    if dtype.itemsize == 8:
        u = (words64(n, seed, offset) >> np.uint64(11)).astype(np.float64) * 2.0**-53
        return np.minimum(low + (high - low) * u, top).reshape(shape)
    u = (words(n, seed, offset) >> np.uint32(8)).astype(np.float32) * np.float32(2**-24)
    a, b = np.float32(low), np.float32(high)
    values = (a + (b - a) * u).astype(dtype).astype(np.float32)
    return np.minimum(values, np.float32(top)).astype(dtype).reshape(shape)


def normal(shape: tuple, dtype, mean: float, std: float, seed: int, offset: int) -> np.ndarray:
    """Normal draws (Box-Muller on pairs of draws) with `mean` and `std`, in a float `dtype`.

    Example:
        >>> normal((2, 3), np.float64, 0.0, 1.0, seed=0, offset=0).shape
        (2, 3)
    """
    n = int(np.prod(shape, dtype=np.int64))
    if np.dtype(dtype).itemsize == 8:
        w = words64(2 * -(-n // 2), seed, offset).reshape(-1, 2)
        unit = (w >> np.uint64(11)).astype(np.float64) * 2.0**-53
        radius = np.sqrt(-2.0 * np.log(unit[:, 0] + 2.0**-53))
        angle = 2 * np.pi * unit[:, 1]
        z = np.stack([mean + std * radius * np.cos(angle), mean + std * radius * np.sin(angle)], axis=1)
        return z.reshape(-1)[:n].reshape(shape)
    w = _blocks(-(-n // 4), seed, offset)
    unit = (w >> np.uint32(8)).astype(np.float32) * np.float32(2**-24)
    radius = np.sqrt(np.float32(-2.0) * np.log(unit[:, 0::2] + np.float32(2**-24)))
    angle = np.float32(2 * np.pi) * unit[:, 1::2]
    a, b = np.float32(mean), np.float32(std)
    z = np.stack([a + b * radius * np.cos(angle), a + b * radius * np.sin(angle)], axis=2)
    return z.reshape(-1)[:n].astype(dtype).reshape(shape)


def randint(shape: tuple, dtype, low: int, high: int, seed: int, offset: int) -> np.ndarray:
    """Integers uniform in [low, high) as `dtype` (low + 64-bit draw mod (high - low))."""
    n = int(np.prod(shape, dtype=np.int64))
    r = words64(n, seed, offset) % np.uint64(high - low)
    return (np.int64(low) + r.astype(np.int64)).astype(dtype).reshape(shape)
