"""Kernels the backend needs that the cube kernel library (`ember.cube.kernels`) does not have.

- `fill`: every element set to one value (the `full` primitive).

Example:
    >>> fill((2, 2), 7, np.dtype(np.int32))
    array([[7, 7],
           [7, 7]], dtype=int32)
"""

from __future__ import annotations

import numpy as np

from ... import cube
from ...cube.kernels.common import check_size, cube_dtype, empty, grid, position


@cube.kernel
def fill_kernel(out: cube.Array["T"], value: cube.Scalar["T"], T: cube.Comptime, shifted: cube.Comptime[bool]):
    i = position(len(out), shifted)
    if shifted or i < len(out):
        out[i] = value


def _host_scalar(value, dtype: np.dtype):
    """`value` converted as `np.full` would, as the Python number a kernel scalar takes."""
    converted = np.full((), value, dtype)
    return float(converted.astype(np.float64)) if dtype.kind in "fV" else converted.item()


def fill(shape: tuple, value, dtype: np.dtype) -> np.ndarray:
    """A new array of `shape` and `dtype` holding `value` everywhere."""
    out = empty(shape, dtype)
    check_size("full", out)
    count, dim = grid(out.size)
    fill_kernel.launch(count, dim, out.reshape(-1), _host_scalar(value, dtype), T=cube_dtype(dtype),
                       shifted=out.size >= dim.x)
    return out
