"""Prefix scans along a dim: cumsum and cumprod, in the input's dtype (f16/bf16 accumulate in f32), and
cumargmax/cumargmin: the i64 position of the running max/min (PyTorch's cummax/cummin indices: the last
position where the running extreme was reached; a NaN sticks as the extreme and each NaN is reached).

One unit scans one row sequentially; rows run in parallel (units vectorize across rows on the CPU,
since neighbouring rows are neighbouring units). The input may have any strides: rows are found
through a layout of the other dims, and the step along `dim` is a stride.

Example:
    >>> scan("cumsum", np.array([[1, 2, 3]], np.int32), dim=1)
    array([[1, 3, 6]], dtype=int32)
"""

from __future__ import annotations

import numpy as np

from .. import cube
from ..dtype import f32
from .common import asarray, check_size, cube_dtype, empty, grid
from .layout import element_strides, offset

OPS = ("cumsum", "cumprod", "cumargmax", "cumargmin")


@cube.kernel
def scan_kernel(x: cube.Array, out: cube.Array, rows: cube.Array[cube.i32], n_rows: cube.i32, n: cube.i32,
                step: cube.i32, op: cube.Comptime[str], T: cube.Comptime, kdim: cube.Comptime[int]):
    """rows = [kept shape, x strides over the kept dims]; out is C-contiguous with `dim` last."""
    r = cube.ABSOLUTE_POS
    if r < n_rows:
        base = offset(r, rows, kdim, 0)
        if op == "cumsum" or op == "cumprod":
            acc = T(0 if op == "cumsum" else 1)
            for j in range(n):
                v = T(x[base + j * step])
                acc = acc + v if op == "cumsum" else acc * v
                out[r * n + j] = out.dtype(acc)
        else:
            best = T(x[base])
            at = cube.i64(0)
            for j in range(n):
                v = T(x[base + j * step])
                better = v > best if op == "cumargmax" else v < best
                best = cube.select(better or v != v, v, best)  # a NaN becomes the extreme and stays
                at = cube.select(v == best or v != v, cube.i64(j), at)
                out[r * n + j] = at


def scan(op: str, x: np.ndarray, dim: int) -> np.ndarray:
    """Inclusive prefix sum or product of `x` along `dim`, or the running argmax/argmin (i64).

    Example:
        >>> scan("cumargmax", np.array([1, 3, 2, 3], np.int32), dim=0)
        array([0, 1, 1, 3])
    """
    if op not in OPS:
        raise ValueError(f"unknown scan {op!r}; known: {', '.join(OPS)}")
    x = asarray(x)
    out_dtype = np.dtype(np.int64) if op.startswith("cumarg") else x.dtype
    if x.ndim == 0:
        return np.zeros((), out_dtype) if op.startswith("cumarg") else x.copy()
    dim = dim % x.ndim
    moved = np.moveaxis(x, dim, -1)
    out = empty(moved.shape, out_dtype, x)
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
