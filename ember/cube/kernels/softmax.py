"""Softmax and log-softmax over the last dim: one cube per row, three passes over the row.

Pass one finds the row max, pass two sums exp(x - max), pass three writes exp(x - max) / sum or
x - max - log(sum). Reductions across the cube's units go through `reduce.block_reduce`.
f16/bf16 rows are computed in f32.

Example:
    >>> softmax(np.zeros((2, 4), np.float32))
    array([[0.25, 0.25, 0.25, 0.25],
           [0.25, 0.25, 0.25, 0.25]], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from ... import cube
from ...errors import DTypeError
from .common import check_size, contiguous, cube_dtype, empty
from .reduce import MAX_UNITS, accumulator, block_reduce


@cube.kernel
def softmax_kernel(x: cube.Array, out: cube.Array, n: cube.i32, log: cube.Comptime[bool],
                   T: cube.Comptime, units: cube.Comptime[int]):
    row = cube.CUBE_POS * n
    m = T(-np.inf)
    for k in range(0, n, units):
        j = k + cube.UNIT_POS
        if j < n:
            m = cube.max(m, T(x[row + j]))
    m = block_reduce("max", m, units)
    s = T(0)
    for k in range(0, n, units):
        j = k + cube.UNIT_POS
        if j < n:
            s += cube.exp(T(x[row + j]) - m)
    s = block_reduce("sum", s, units)
    shift = m + cube.log(s)
    for k in range(0, n, units):
        j = k + cube.UNIT_POS
        if j < n:
            v = T(x[row + j])
            out[row + j] = out.dtype(v - shift if log else cube.exp(v - m) / s)


def _units(n: int) -> int:
    return min(MAX_UNITS, 1 << max(0, (n - 1).bit_length()))


def softmax(x: np.ndarray, log: bool = False) -> np.ndarray:
    """exp(x) / sum(exp(x)) over the last dim (or its log, stably, when `log`).

    Example:
        >>> softmax(np.array([0.0, 0.0], np.float32), log=True)
        array([-0.6931472, -0.6931472], dtype=float32)
    """
    t = cube_dtype(x.dtype)
    if not t.is_float:
        raise DTypeError(f"softmax needs a float input, got {t.name}")
    x = contiguous(x)
    out = empty(x.shape, x.dtype, x)
    check_size("softmax", x)
    if x.size == 0:
        return out
    n = x.shape[-1] if x.ndim else 1
    units = _units(n)
    softmax_kernel.launch(cube.CubeCount(x.size // n), cube.CubeDim(units), x, out, n, log=log,
                          T=accumulator("sum", t), units=units)
    return out
