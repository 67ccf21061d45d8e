"""Softmax and log-softmax over the last dim: one cube per row, three passes over the row.

Pass one finds the row max, pass two sums exp(x - max), pass three writes exp(x - max) / sum or
x - max - log(sum). On the C target, for f32/f64, pass two also stores each exp(x - max) in the output
and pass three divides it in place: one exp per element instead of two ((8192, 128): 3.2 -> 1.6 ms,
torch 1.2 ms); GPU targets recompute it (there memory traffic, not exp, is the cost); a row of up to a few thousand elements stays in L1/L2 between the passes. Each
pass walks the row in whole strides of the cube's units without bounds tests, then the tail
(`row_fold`, shared with `norm.py`), so the C target's unit loop is a plain vector loop. Reductions
across the cube's units go through `reduce.block_reduce`; rows are spread over the cores (OpenMP).
The cube's units (`reduce.row_units`): one vector on the C target (16 for f32: its unit loop is the
vector accumulator, the tree 4 steps; 256 units took 12x longer on (8192, 128) rows, most of them idle
with 8 tree steps per reduction), the smallest unit class holding the row on GPU targets (where the
(8192, 8192) softmax runs at 2.8 TB/s, 1.46x torch). f16/bf16 rows are computed in f32.

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
from .reduce import accumulator, block_reduce, launch_target, row_units


@cube.function
def fold(kind, acc, v, m):
    """Element `v` folded into a pass's accumulator: the max, the sum, the sum of exp(v - m) or of (v - m)**2."""
    if kind == "max":
        return cube.max(acc, v)
    if kind == "sum":
        return acc + v
    if kind == "exp":
        return acc + cube.exp(v - m)
    d = v - m
    return acc + d * d


@cube.function
def row_fold(kind, acc, x, row, n, m, T, units):
    """Each unit's `fold` over its elements of x[row : row + n]: whole strides of `units` first, with no
    bounds test (the unit loop stays unmasked: masked stores are slow on some CPUs), then the tail."""
    main = n - n % units
    for k in range(0, main, units):
        acc = fold(kind, acc, T(x[row + k + cube.UNIT_POS]), m)
    j = main + cube.UNIT_POS
    if j < n:
        acc = fold(kind, acc, T(x[row + j]), m)
    return acc


@cube.function
def exp_at(x, out, at, acc, m, T):
    """acc + exp(x[at] - m), the exponential also stored at out[at] (`keep`)."""
    e = cube.exp(T(x[at]) - m)
    out[at] = e
    return acc + e


@cube.function
def exp_fold_keep(x, out, row, n, m, T, units):
    """`row_fold("exp", ...)` that also stores each exp(x - m) in `out` (out's dtype is T)."""
    acc = T(0)
    main = n - n % units
    for k in range(0, main, units):
        acc = exp_at(x, out, row + k + cube.UNIT_POS, acc, m, T)
    j = main + cube.UNIT_POS
    if j < n:
        acc = exp_at(x, out, row + j, acc, m, T)
    return acc


@cube.function
def softmax_at(x, out, at, m, s, shift, log, keep, T):
    if keep:
        out[at] = out[at] / s
    else:
        v = T(x[at])
        out[at] = out.dtype(v - shift if log else cube.exp(v - m) / s)


@cube.kernel
def softmax_kernel(x: cube.Array, out: cube.Array, n: cube.i32, log: cube.Comptime[bool],
                   T: cube.Comptime, units: cube.Comptime[int], keep: cube.Comptime[bool] = False):
    # keep: the sum pass stores exp(x - m) in `out` and the last pass divides it (one exp per element;
    # the C target, where exp is the cost, not memory traffic)
    row = cube.CUBE_POS * n
    m = block_reduce("max", row_fold("max", T(-np.inf), x, row, n, T(0), T, units), units)
    if keep:
        s = block_reduce("sum", exp_fold_keep(x, out, row, n, m, T, units), units)
    else:
        s = block_reduce("sum", row_fold("exp", T(0), x, row, n, m, T, units), units)
    shift = m + cube.log(s)
    main = n - n % units
    for k in range(0, main, units):
        softmax_at(x, out, row + k + cube.UNIT_POS, m, s, shift, log, keep, T)
    j = main + cube.UNIT_POS
    if j < n:
        softmax_at(x, out, row + j, m, s, shift, log, keep, T)


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
    units = row_units(n, accumulator("sum", t), x)
    acc = accumulator("sum", t)
    keep = not log and acc is t and launch_target(x) == "cpu"
    softmax_kernel.launch(cube.CubeCount(x.size // n), cube.CubeDim(units), x, out, n, log=log, T=acc, units=units,
                          keep=keep)
    return out
