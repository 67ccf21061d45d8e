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
    return _generator(seed, offset).uniform(low, high, size=shape).astype(dtype.np)


@primitive("normal", infer=_creation_infer)
def normal(*, shape, dtype, mean, std, seed, offset):
    return (_generator(seed, offset).standard_normal(size=shape) * std + mean).astype(dtype.np)


@primitive("randint", infer=_creation_infer)
def randint(*, shape, dtype, low, high, seed, offset):
    return _generator(seed, offset).integers(low, high, size=shape).astype(dtype.np)
