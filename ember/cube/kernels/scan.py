"""Prefix scans along a dim: cumsum and cumprod, in the input's dtype (f16/bf16 accumulate in f32).

One unit scans one row sequentially; rows run in parallel (units vectorize across rows on the CPU,
since neighbouring rows are neighbouring units). The input may have any strides: rows are found
through a layout of the other dims, and the step along `dim` is a stride.

Example:
    >>> scan("cumsum", np.array([[1, 2, 3]], np.int32), dim=1)
    array([[1, 3, 6]], dtype=int32)
"""

from __future__ import annotations

import numpy as np

from ... import cube
from ...dtype import f32
from .common import asarray, check_size, cube_dtype, element_strides, empty, grid, offset

OPS = ("cumsum", "cumprod")


@cube.kernel
def scan_kernel(x: cube.Array, out: cube.Array, rows: cube.Array[cube.i32], n_rows: cube.i32, n: cube.i32,
                step: cube.i32, op: cube.Comptime[str], T: cube.Comptime, kdim: cube.Comptime[int]):
    """rows = [kept shape, x strides over the kept dims]; out is C-contiguous with `dim` last."""
    r = cube.ABSOLUTE_POS
    if r < n_rows:
        base = offset(r, rows, kdim, 0)
        acc = T(0 if op == "cumsum" else 1)
        for j in range(n):
            v = T(x[base + j * step])
            acc = acc + v if op == "cumsum" else acc * v
            out[r * n + j] = out.dtype(acc)


def scan(op: str, x: np.ndarray, dim: int) -> np.ndarray:
    """Inclusive prefix sum or product of `x` along `dim`."""
    if op not in OPS:
        raise ValueError(f"unknown scan {op!r}; known: {', '.join(OPS)}")
    x = asarray(x)
    if x.ndim == 0:
        return x.copy()
    dim = dim % x.ndim
    moved = np.moveaxis(x, dim, -1)
    out = empty(moved.shape, x.dtype, x)
    check_size(op, x)
    n = moved.shape[-1]
    n_rows = out.size // n if n else 0
    if n_rows:
        strides = element_strides(moved)
        layout = np.asarray(list(moved.shape[:-1]) + list(strides[:-1]), np.int32)
        t = cube_dtype(x.dtype)
        count, cube_dim = grid(n_rows)
        scan_kernel.launch(count, cube_dim, moved, out, layout, n_rows, n, strides[-1], op=op,
                           T=f32 if t.is_float and t.itemsize < 4 else t, kdim=x.ndim - 1)
    return np.moveaxis(out, -1, dim).copy() if dim != x.ndim - 1 else out
