"""Creation primitives: `full` and the random generators.

Random primitives are pure functions of `(seed, offset, shape)`: the device's random stream hands out
non-overlapping offsets, so a given seed gives the same numbers whatever the threads or the laziness of
the backend. The NumPy reference uses the counter-based Philox generator keyed by the seed with its
counter set to the offset.

Example:
    >>> registry["full"].infer(shape=(2, 2), value=1.0, dtype=f32)
    Aval(shape=(2, 2), dtype=f32)
"""

from __future__ import annotations

import numpy as np

from ..dtype import DType
from .primitive import Aval, primitive


def _creation_infer(*, shape: tuple[int, ...], dtype: DType, **_params) -> Aval:
    return Aval(shape, dtype)


@primitive("full", infer=_creation_infer)
def full(*, shape, value, dtype):
    return np.full(shape, value, dtype=dtype.np)


def _generator(seed: int, offset: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(key=seed, counter=offset))


@primitive("uniform", infer=_creation_infer)
def uniform(*, shape, dtype, low, high, seed, offset):
    values = _generator(seed, offset).uniform(low, high, size=shape)
    out = values.astype(dtype.np)
    if dtype.itemsize < 8 and high > low:
        # Rounding to f32/f16/bf16 can reach `high` itself; keep the interval half-open as PyTorch does
        # by stepping those values down to the largest one below `high`.
        top = np.asarray(high, dtype.np)
        if float(top) >= high:
            top = _step_down(top)
        out = np.where(out.astype(np.float64) >= high, top, out).astype(dtype.np)
    return out


def _step_down(value: np.ndarray) -> np.ndarray:
    """The next representable value toward minus infinity (bit arithmetic works for bf16 too)."""
    kind = {2: np.uint16, 4: np.uint32}[value.dtype.itemsize]
    bits = value.view(kind)
    if float(value) > 0:
        return (bits - kind(1)).view(value.dtype)
    if float(value) == 0:
        return np.asarray(1 << (8 * value.dtype.itemsize - 1) | 1, kind).view(value.dtype)
    return (bits + kind(1)).view(value.dtype)


@primitive("normal", infer=_creation_infer)
def normal(*, shape, dtype, mean, std, seed, offset):
    return (_generator(seed, offset).standard_normal(size=shape) * std + mean).astype(dtype.np)


@primitive("randint", infer=_creation_infer)
def randint(*, shape, dtype, low, high, seed, offset):
    return _generator(seed, offset).integers(low, high, size=shape).astype(dtype.np)
