"""Kernels the backend needs that the cube kernel library (`ember.cube.kernels`) does not have yet.

- `fill`: every element set to one value (the `full` primitive).
- `randint`: integers uniform in [low, high) from the same Philox4x32-10 stream as the library's
  `uniform`/`normal`: element j takes words (2(j % 2), 2(j % 2) + 1) of block `offset + j // 2`, joined
  into a u64 w, and is low + w mod (high - low). The modulo bias is at most (high - low) / 2**64.

Example:
    >>> fill((2, 2), 7, np.dtype(np.int32))
    array([[7, 7],
           [7, 7]], dtype=int32)
"""

from __future__ import annotations

import numpy as np

from ... import cube
from ...cube.kernels.common import check_size, cube_dtype, grid
from ...cube.kernels.random import _split, philox_block


@cube.kernel
def fill_kernel(out: cube.Array["T"], value: cube.Scalar["T"], T: cube.Comptime):
    i = cube.ABSOLUTE_POS
    if i < len(out):
        out[i] = value


@cube.kernel
def randint_kernel(out: cube.Array, n: cube.i32, key0: cube.u32, key1: cube.u32, ctr0: cube.u32,
                   ctr1: cube.u32, low: cube.i64, span: cube.u64):
    i = cube.ABSOLUTE_POS
    if i * 2 < n:
        c0 = ctr0 + cube.u32(i)
        c1 = ctr1 + cube.select(c0 < ctr0, cube.u32(1), cube.u32(0))  # carry into the high word
        w = philox_block(c0, c1, cube.u32(0), cube.u32(0), key0, key1)
        for j in cube.unroll(range(2)):
            if i * 2 + j < n:
                word = (cube.u64(w[2 * j]) << cube.u64(32)) | cube.u64(w[2 * j + 1])
                out[i * 2 + j] = cube.cast(low + cube.i64(word % span), out.dtype)


def _host_scalar(value, dtype: np.dtype):
    """`value` converted as `np.full` would, as the Python number a kernel scalar takes."""
    converted = np.full((), value, dtype)
    return float(converted.astype(np.float64)) if dtype.kind in "fV" else converted.item()


def fill(shape: tuple, value, dtype: np.dtype) -> np.ndarray:
    """A new array of `shape` and `dtype` holding `value` everywhere."""
    out = np.empty(shape, dtype)
    check_size("full", out)
    count, dim = grid(out.size)
    fill_kernel.launch(count, dim, out.reshape(-1), _host_scalar(value, dtype), T=cube_dtype(dtype))
    return out


def randint(shape: tuple, seed: int, offset: int, low: int, high: int, dtype: np.dtype) -> np.ndarray:
    """Integers uniform in [low, high) from the Philox stream (seed, offset)."""
    out = np.empty(shape, dtype)
    check_size("randint", out)
    k0, k1 = _split(seed)
    c0, c1 = _split(offset)
    count, dim = grid(-(-out.size // 2))
    randint_kernel.launch(count, dim, out.reshape(-1), out.size, k0, k1, c0, c1, low, high - low)
    return out
