"""Kernels the backend needs that the cube kernel library (`ember.cube.kernels`) does not have yet.

- `fill`: every element set to one value (the `full` primitive).
- `randint`: integers uniform in [low, high) from the same Philox4x32-10 stream as the library's
  `uniform`/`normal`: element j takes words (2(j % 2), 2(j % 2) + 1) of block `offset + j // 2`, joined
  into a u64 w, and is low + w mod (high - low). The modulo bias is at most (high - low) / 2**64.
- `uniform64`: f64 uniform in [low, high) with 53 random bits (the top bits of the same u64 w); the
  library's `uniform` has 24, so f64 draws would repeat after a few thousand numbers.

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


@cube.function
def words64(i, key0, key1, ctr0, ctr1):
    """The two u64 words of Philox block `ctr + i`: elements 2i and 2i + 1 of a stream."""
    c0 = ctr0 + cube.u32(i)
    c1 = ctr1 + cube.select(c0 < ctr0, cube.u32(1), cube.u32(0))  # carry into the high word
    w = philox_block(c0, c1, cube.u32(0), cube.u32(0), key0, key1)
    return tuple((cube.u64(w[2 * j]) << cube.u64(32)) | cube.u64(w[2 * j + 1]) for j in range(2))


@cube.kernel
def randint_kernel(out: cube.Array, n: cube.i32, key0: cube.u32, key1: cube.u32, ctr0: cube.u32,
                   ctr1: cube.u32, low: cube.i64, span: cube.u64):
    i = cube.ABSOLUTE_POS
    if i * 2 < n:
        words = words64(i, key0, key1, ctr0, ctr1)
        for j in cube.unroll(range(2)):
            if i * 2 + j < n:
                out[i * 2 + j] = cube.cast(low + cube.i64(words[j] % span), out.dtype)


@cube.kernel
def uniform64_kernel(out: cube.Array[cube.f64], n: cube.i32, key0: cube.u32, key1: cube.u32, ctr0: cube.u32,
                     ctr1: cube.u32, low: cube.f64, high: cube.f64):
    i = cube.ABSOLUTE_POS
    if i * 2 < n:
        words = words64(i, key0, key1, ctr0, ctr1)
        for j in cube.unroll(range(2)):
            if i * 2 + j < n:
                u = cube.f64(words[j] >> cube.u64(11)) * 1.1102230246251565e-16  # 53 bits * 2**-53
                out[i * 2 + j] = low + (high - low) * u


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
    return _pairs(randint_kernel, "randint", shape, dtype, seed, offset, low, high - low)


def uniform64(shape: tuple, seed: int, offset: int, low: float, high: float) -> np.ndarray:
    """f64 numbers uniform in [low, high) with 53 random bits, from the Philox stream (seed, offset)."""
    return _pairs(uniform64_kernel, "uniform", shape, np.dtype(np.float64), seed, offset, low, high)


def _pairs(kernel, op: str, shape: tuple, dtype: np.dtype, seed: int, offset: int, a, b) -> np.ndarray:
    """Launch a kernel that writes two elements per Philox block (one unit per block)."""
    out = np.empty(shape, dtype)
    check_size(op, out)
    k0, k1 = _split(seed)
    c0, c1 = _split(offset)
    count, dim = grid(-(-out.size // 2))
    kernel.launch(count, dim, out.reshape(-1), out.size, k0, k1, c0, c1, a, b)
    return out
