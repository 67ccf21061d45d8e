"""Sort, argsort and top-k along a dim: a bitonic network in shared memory, one cube per row.

A row of n elements is padded to the next power of two and sorted as (value, index) pairs by
log2(size) * (log2(size) + 1) / 2 compare-exchange stages, each one phase between barriers. The
order is total: padding after everything, NaN after every number (before, when descending), then
the value, then the original index; so equal values keep their order and the result is exactly a
stable sort. Rows longer than `MAX_ROW` are refused (the row lives in one cube's shared memory).

Example:
    >>> sort(np.array([[3.0, 1.0, 2.0]], np.float32))
    (array([[1., 2., 3.]], dtype=float32), array([[1, 2, 0]]))
"""

from __future__ import annotations

import numpy as np

from .. import cube
from ..dtype import i64
from ..errors import ShapeError
from .common import asarray, check_size, contiguous, cube_dtype, empty, zeros

MAX_ROW = 16384
MAX_UNITS = 256


def bitonic_stages(size: int) -> list:
    """(k, j) for every compare-exchange stage of a bitonic sort of `size` (a power of two) slots."""
    stages, k = [], 2
    while k <= size:
        j = k // 2
        while j >= 1:
            stages.append((k, j))
            j //= 2
        k *= 2
    return stages


@cube.function
def before(a, ia, b, ib, n, descending):
    """True when (a, ia) belongs before (b, ib) in the sorted row."""
    a_pad, b_pad = ia >= n, ib >= n
    a_nan, b_nan = a != a, b != b
    if descending:
        value_first = (a_nan and not b_nan) or (a > b)
    else:
        value_first = (b_nan and not a_nan) or (a < b)
    same = (a == b) or (a_nan and b_nan)
    ordered = value_first or (same and ia < ib)
    return cube.select(a_pad != b_pad, b_pad, cube.select(a_pad, ia < ib, ordered))


@cube.kernel
def sort_kernel(x: cube.Array, values: cube.Array, index: cube.Array[cube.i64], n: cube.i32, k: cube.i32,
                T: cube.Comptime, size: cube.Comptime[int], units: cube.Comptime[int],
                descending: cube.Comptime[bool]):
    row = cube.CUBE_POS
    vals = cube.shared(T, size)
    idx = cube.shared(cube.i32, size)
    for s0 in range(0, size, units):
        i = s0 + cube.UNIT_POS
        vals[i] = cube.select(i < n, T(x[row * n + cube.min(i, n - 1)]), T(0))
        idx[i] = i
    cube.sync_units()
    for stage_k, j in bitonic_stages(size):
        for s0 in range(0, size // 2, units):
            t = s0 + cube.UNIT_POS
            lo = 2 * j * (t // j) + t % j
            hi = lo + j
            a, ia, b, ib = vals[lo], idx[lo], vals[hi], idx[hi]
            ascending = (lo & stage_k) == 0
            swap = cube.select(ascending, before(b, ib, a, ia, n, descending), before(a, ia, b, ib, n, descending))
            if swap:
                vals[lo], idx[lo], vals[hi], idx[hi] = b, ib, a, ia
        cube.sync_units()
    for s0 in range(0, size, units):
        i = s0 + cube.UNIT_POS
        if i < k:
            values[row * k + i] = values.dtype(vals[i])
            index[row * k + i] = cube.i64(idx[i])


def _sorted_rows(x: np.ndarray, dim: int, k: int, descending: bool) -> tuple:
    x = asarray(x)
    if x.ndim == 0:
        return x.copy(), zeros((), i64.np, x)
    dim = dim % x.ndim
    n = x.shape[dim]
    if n > MAX_ROW:
        raise ShapeError("sort", f"rows of {n} elements exceed the {MAX_ROW} one cube can sort")
    rows = contiguous(np.moveaxis(x, dim, -1))
    shape = rows.shape[:-1] + (k,)
    values, index = empty(shape, x.dtype, x), empty(shape, i64.np, x)
    check_size("sort", rows)
    if values.size:
        size = 1 << max(1, (n - 1).bit_length())
        units = min(MAX_UNITS, size // 2)
        t = cube_dtype(x.dtype)
        sort_kernel.launch(cube.CubeCount(rows.size // n), cube.CubeDim(units), rows, values, index, n, k,
                           T=cube.f32 if t.is_float and t.itemsize < 4 else t, size=size, units=units,
                           descending=descending)
    return np.moveaxis(values, -1, dim), np.moveaxis(index, -1, dim)


def sort(x: np.ndarray, dim: int = -1, descending: bool = False) -> tuple:
    """(values, indices) of `x` sorted along `dim`, stably; NaN sorts as the largest value."""
    return _sorted_rows(x, dim, np.shape(x)[dim] if np.ndim(x) else 1, descending)


def topk(x: np.ndarray, k: int, dim: int = -1, largest: bool = True) -> tuple:
    """(values, indices) of the k largest (or smallest) elements along `dim`, in sorted order."""
    n = np.shape(x)[dim] if np.ndim(x) else 1
    if not 0 <= k <= n:
        raise ShapeError("topk", f"k={k} is out of range for a dim of size {n}")
    return _sorted_rows(x, dim, k, largest)
