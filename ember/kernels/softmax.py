"""Softmax and log-softmax over the last dim, and softmax's gradient.

GPU targets (CUDA, WGSL), rows of up to 8192 elements: the row is held in registers
(`softmax_resident_kernel`, shape from `reduce.resident_shape`): a plane (warp) per row up to 1024
elements on CUDA (8 rows per cube), else a cube of 256 units per row, up to 32 elements per unit; the
row is read once and written once. `softmax_grad` (y * (g - sum(g * y)), or g - exp(y) * sum(g)) holds
y and g the same way.

Longer rows, and the C target: one cube per row, three passes over the row (the row max, the sum of
exp(x - max), then exp(x - max) / sum or x - max - log(sum)). On the C target, for f32/f64, pass two
also stores each exp(x - max) in the output and pass three divides it in place; GPU targets recompute
it. Each pass walks the row in whole strides of the cube's units, then the tail (`row_fold`, shared
with `norm.py`). Reductions across the cube's units go through `reduce.block_reduce`; rows are spread
over the cores (OpenMP). The cube's units (`reduce.row_units`): one vector on the C target, the
smallest unit class holding the row on GPU targets. f16/bf16 rows are computed in f32. Why, with
figures: docs/cube.md, "Reductions and softmax".

Example:
    >>> softmax(np.zeros((2, 4), np.float32))
    array([[0.25, 0.25, 0.25, 0.25],
           [0.25, 0.25, 0.25, 0.25]], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from .. import cube
from ..errors import DTypeError, ShapeError
from .common import check_size, contiguous, cube_dtype, empty
from .reduce import (MAX_UNITS, RESIDENT_PER, accumulator, block_reduce, launch_target, resident_shape, row_units,
                     tuple_fold, units_combine)


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


@cube.function
def resident_row(x, row, n, span, per, full, T):
    """This unit's elements x[row + r * span + UNIT_POS % span] for r < per, as a tuple of T (the row is
    held by the `span` units that share it; coalesced across them). Past the row's end (unless `full`:
    n == span * per) each reads the row's last element again, which leaves a max unchanged; sums mask
    them (`masked`)."""
    if full:
        return tuple(T(x[row + r * span + cube.UNIT_POS % span]) for r in range(per))
    return tuple(T(x[row + cube.min(r * span + cube.UNIT_POS % span, n - 1)]) for r in range(per))


@cube.function
def masked(v, n, span, full, T):
    """`v` (a `resident_row` tuple or one computed from it) with the slots past the row's end zeroed."""
    if full:
        return v
    return tuple(cube.select(r * span + cube.UNIT_POS % span < n, v[r], T(0)) for r in range(len(v)))


@cube.function
def store_row(out, row, n, v, span, full):
    """out[row + r * span + UNIT_POS % span] = v[r] (in out's dtype) for the slots inside the row."""
    for r in cube.unroll(range(len(v))):
        j = r * span + cube.UNIT_POS % span
        if full:
            out[row + j] = out.dtype(v[r])
        else:
            if j < n:
                out[row + j] = out.dtype(v[r])


@cube.function
def row_index(units, span):
    """The row of this unit's `span` units: the cube's (`span == units`), or its plane's."""
    if span == units:
        return cube.CUBE_POS
    return cube.CUBE_POS * (units // span) + cube.UNIT_POS // span


@cube.function
def softmax_row(x, out, row, n, log, T, span, per, lanes, full):
    v = resident_row(x, row, n, span, per, full, T)
    m = units_combine("max", tuple_fold("max", v), span, lanes, T)
    d = tuple(v[r] - m for r in range(per))
    e = tuple(cube.exp(d[r]) for r in range(per))
    s = units_combine("sum", tuple_fold("sum", masked(e, n, span, full, T)), span, lanes, T)
    if log:
        shift = cube.log(s)
        store_row(out, row, n, tuple(d[r] - shift for r in range(per)), span, full)
    else:
        store_row(out, row, n, tuple(e[r] / s for r in range(per)), span, full)


@cube.kernel
def softmax_resident_kernel(x: cube.Array, out: cube.Array, n: cube.i32, rows: cube.i32, log: cube.Comptime[bool],
                            T: cube.Comptime, units: cube.Comptime[int], span: cube.Comptime[int],
                            per: cube.Comptime[int], lanes: cube.Comptime[int], full: cube.Comptime[bool]):
    # Rows held in registers (`reduce.resident_shape`: a cube or a plane per row): one read, one write.
    i = row_index(units, span)
    if span == units:
        softmax_row(x, out, i * n, n, log, T, span, per, lanes, full)
    else:
        if i < rows:  # whole planes take this branch or skip it: their plane ops see every lane
            softmax_row(x, out, i * n, n, log, T, span, per, lanes, full)


@cube.function
def softmax_grad_row(y, g, dx, row, n, log, T, span, per, lanes, full):
    yv = resident_row(y, row, n, span, per, full, T)
    gv = resident_row(g, row, n, span, per, full, T)
    if log:
        s = units_combine("sum", tuple_fold("sum", masked(gv, n, span, full, T)), span, lanes, T)
        store_row(dx, row, n, tuple(gv[r] - cube.exp(yv[r]) * s for r in range(per)), span, full)
    else:
        gy = tuple(gv[r] * yv[r] for r in range(per))
        s = units_combine("sum", tuple_fold("sum", masked(gy, n, span, full, T)), span, lanes, T)
        store_row(dx, row, n, tuple(gy[r] - yv[r] * s for r in range(per)), span, full)


@cube.kernel
def softmax_grad_resident_kernel(y: cube.Array, g: cube.Array, dx: cube.Array, n: cube.i32, rows: cube.i32,
                                 log: cube.Comptime[bool], T: cube.Comptime, units: cube.Comptime[int],
                                 span: cube.Comptime[int], per: cube.Comptime[int], lanes: cube.Comptime[int],
                                 full: cube.Comptime[bool]):
    # The input gradient from softmax's output y and its gradient g, both rows held as in the forward:
    # y * (g - sum(g * y)), or g - exp(y) * sum(g) for log-softmax.
    i = row_index(units, span)
    if span == units:
        softmax_grad_row(y, g, dx, i * n, n, log, T, span, per, lanes, full)
    else:
        if i < rows:
            softmax_grad_row(y, g, dx, i * n, n, log, T, span, per, lanes, full)


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
    acc = accumulator("sum", t)
    rows = x.size // n
    target = launch_target(x)
    resident = resident_shape(n, target) if target != "cpu" else None  # the C target keeps its vector rows
    if resident is not None:
        units, span, per, lanes = resident
        softmax_resident_kernel.launch(cube.CubeCount(-(-rows // (units // span))), cube.CubeDim(units), x, out, n,
                                       rows, log=log, T=acc, units=units, span=span, per=per, lanes=lanes,
                                       full=n == span * per)
        return out
    units = row_units(n, acc, x)
    keep = not log and acc is t and target == "cpu"
    softmax_kernel.launch(cube.CubeCount(rows), cube.CubeDim(units), x, out, n, log=log, T=acc, units=units,
                          keep=keep)
    return out


def softmax_grad(y: np.ndarray, g: np.ndarray, log: bool = False) -> np.ndarray:
    """The gradient of `softmax(x, log)` with respect to x from its output `y` and that output's gradient
    `g` (same shape and float dtype): y * (g - sum(g * y)), or g - exp(y) * sum(g) when `log`, over the
    last dim. Rows of up to `reduce.resident_shape`'s length on GPU targets (one read of each, one write).

    Example:
        >>> softmax_grad(np.full((1, 2), 0.5, np.float32), np.array([[1.0, 0.0]], np.float32))
        array([[ 0.25, -0.25]], dtype=float32)
    """
    t = cube_dtype(y.dtype)
    if not t.is_float or g.dtype != y.dtype:
        raise DTypeError(f"softmax_grad needs y and g of one float dtype, got {y.dtype} and {g.dtype}")
    if g.shape != y.shape:
        raise ShapeError("softmax_grad", f"needs y and g of one shape, got {y.shape} and {g.shape}")
    y, g = contiguous(y), contiguous(g)
    dx = empty(y.shape, y.dtype, y, g)
    check_size("softmax_grad", y)
    if y.size == 0:
        return dx
    n = y.shape[-1] if y.ndim else 1
    resident = resident_shape(n, launch_target(y))
    if resident is None:
        raise ShapeError("softmax_grad", f"rows of {n} elements are longer than a cube holds "
                         f"({MAX_UNITS * RESIDENT_PER})")
    units, span, per, lanes = resident
    softmax_grad_resident_kernel.launch(cube.CubeCount(-(-(y.size // n) // (units // span))), cube.CubeDim(units), y,
                                        g, dx, n, y.size // n, log=log, T=accumulator("sum", t), units=units,
                                        span=span, per=per, lanes=lanes, full=n == span * per)
    return dx
