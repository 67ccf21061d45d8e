"""Creation primitives: `full` and the random generators.

Random primitives are pure functions of `(seed, offset, shape)`: the device's random stream hands out
non-overlapping offsets, so a given seed gives the same numbers whatever the threads or the laziness of
the backend. The references are the definition of the numbers every backend draws (`ember/random.py`:
Philox4x32-10 keyed by the seed, its counter starting at the offset).

Example:
    >>> registry["full"].infer(shape=(2, 2), value=1.0, dtype=f32)
    Aval(shape=(2, 2), dtype=f32)
"""

from __future__ import annotations

import numpy as np

from .. import random as _stream
from ..dtype import DType
from .primitive import Aval, primitive


def _creation_infer(*, shape: tuple[int, ...], dtype: DType, **_params) -> Aval:
    return Aval(shape, dtype)


@primitive("full", infer=_creation_infer)
def full(*, shape, value, dtype):
    return np.full(shape, value, dtype=dtype.np)


@primitive("uniform", infer=_creation_infer)
def uniform(*, shape, dtype, low, high, seed, offset):
    return _stream.uniform(shape, dtype.np, low, high, seed, offset)


@primitive("normal", infer=_creation_infer)
def normal(*, shape, dtype, mean, std, seed, offset):
    return _stream.normal(shape, dtype.np, mean, std, seed, offset)


@primitive("randint", infer=_creation_infer)
def randint(*, shape, dtype, low, high, seed, offset):
    return _stream.randint(shape, dtype.np, low, high, seed, offset)
