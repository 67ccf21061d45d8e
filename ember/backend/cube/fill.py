"""Kernels the backend needs that the cube kernel library (`ember.kernels`) does not have.

- `fill`: every element set to one value (the `full` primitive).

Example:
    >>> fill((2, 2), 7, np.dtype(np.int32), runtime=cpu_runtime())
    array([[7, 7],
           [7, 7]], dtype=int32)
"""

from __future__ import annotations

import numpy as np

from ... import cube
from ...kernels.common import check_size, cube_dtype, empty, grid, position
from ...cube.runtime.base import Runtime


@cube.kernel
def fill_kernel(out: cube.Array["T"], value: cube.Scalar["T"], T: cube.Comptime, shifted: cube.Comptime[bool]):
    i = position(len(out), shifted)
    if shifted or i < len(out):
        out[i] = value


def _host_scalar(value, dtype: np.dtype):
    """`value` converted as `np.full` would, as the Python number a kernel scalar takes."""
    converted = np.full((), value, dtype)
    return float(converted.astype(np.float64)) if dtype.kind in "fV" else converted.item()


def fill(shape: tuple, value, dtype: np.dtype, *like, runtime: Runtime | None = None):
    """A new array of `shape` and `dtype` holding `value` everywhere, made as `empty(shape, dtype, *like,
    runtime=runtime)` makes it: on the runtime of `like`'s device arrays, else on `runtime`."""
    out = empty(shape, dtype, *like, runtime=runtime)
    check_size("full", out)
    count, dim = grid(out.size)
    fill_kernel.launch(count, dim, out.reshape(-1), _host_scalar(value, dtype), T=cube_dtype(dtype),
                       shifted=out.size >= dim.x)
    return out
