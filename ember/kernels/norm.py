"""Layer norm and RMS norm over the last dim, and their gradients.

    layer_norm(x) = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias     (biased variance)
    rms_norm(x)   = x / sqrt(mean(x**2) + eps) * weight

`weight` and `bias` are optional (comptime flags choose the code); f16/bf16 rows are computed in f32.
The variance is the mean of the centred squares (no cancellation). GPU targets, rows of up to 8192
elements: the row is held in registers as in `softmax.py` (`norm_resident_kernel`: one read, one
write). `norm_grad`
holds x and the output's gradient the same way and writes the input's gradient, while each cube sums
the weight's and bias's gradients of its rows in registers (a unit owns the same columns in every
row); `partial_sums_kernel` adds the cubes' sums. Longer rows and the C target: one cube per row, two
reading passes (mean, then the centred sum of squares) and one writing pass, each in unmasked strides
of the cube's units then the tail (`softmax.row_fold`); the cube's units as in softmax
(`reduce.row_units`: one vector on the C target).

Example:
    >>> layer_norm(np.array([[1.0, 3.0]], np.float32))
    array([[-0.999995,  0.999995]], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from .. import cube
from ..errors import DTypeError, ShapeError
from .common import check_size, contiguous, cube_dtype, empty
from .reduce import (MAX_UNITS, RESIDENT_PER, accumulator, block_reduce, launch_target, resident_shape, row_units,
                     tuple_fold, units_combine)
from .softmax import masked, resident_row, row_fold, row_index, store_row


@cube.function
def norm_at(x, weight, bias, out, row, j, mean, inv, has_weight, has_bias, T):
    y = (T(x[row + j]) - mean) * inv
    if has_weight:
        y = y * T(weight[j])
    if has_bias:
        y = y + T(bias[j])
    out[row + j] = out.dtype(y)


@cube.function
def centred(v, n, eps, rms, T, span, per, lanes, full):
    """(d, inv) of a held row `v`: d = v - mean(v) (v itself for RMS norm), inv = 1 / sqrt(mean(d^2) + eps);
    the mean of squares is of the centred values (a second pass over the registers: no cancellation)."""
    d = v
    if not rms:
        mean = units_combine("sum", tuple_fold("sum", masked(v, n, span, full, T)), span, lanes, T) / T(n)
        d = tuple(v[r] - mean for r in range(per))
    sq = masked(tuple(d[r] * d[r] for r in range(per)), n, span, full, T)
    return d, cube.rsqrt(units_combine("sum", tuple_fold("sum", sq), span, lanes, T) / T(n) + T(eps))


@cube.function
def norm_row(x, weight, bias, out, row, n, eps, rms, has_weight, has_bias, T, span, per, lanes, full):
    d, inv = centred(resident_row(x, row, n, span, per, full, T), n, eps, rms, T, span, per, lanes, full)
    y = tuple(d[r] * inv for r in range(per))
    if has_weight:  # weight[j] and bias[j] for this unit's columns j (read like a row at 0)
        w = resident_row(weight, 0, n, span, per, full, T)
        y = tuple(y[r] * w[r] for r in range(per))
    if has_bias:
        b = resident_row(bias, 0, n, span, per, full, T)
        y = tuple(y[r] + b[r] for r in range(per))
    store_row(out, row, n, y, span, full)


@cube.kernel
def norm_resident_kernel(x: cube.Array, weight: cube.Array, bias: cube.Array, out: cube.Array, n: cube.i32,
                         rows: cube.i32, eps: cube.f32, rms: cube.Comptime[bool], has_weight: cube.Comptime[bool],
                         has_bias: cube.Comptime[bool], T: cube.Comptime, units: cube.Comptime[int],
                         span: cube.Comptime[int], per: cube.Comptime[int], lanes: cube.Comptime[int],
                         full: cube.Comptime[bool]):
    # Rows held in registers (`reduce.resident_shape`: a cube or a plane per row): one read, one write.
    i = row_index(units, span)
    if span == units:
        norm_row(x, weight, bias, out, i * n, n, eps, rms, has_weight, has_bias, T, span, per, lanes, full)
    else:
        if i < rows:  # whole planes take this branch or skip it: their plane ops see every lane
            norm_row(x, weight, bias, out, i * n, n, eps, rms, has_weight, has_bias, T, span, per, lanes, full)


@cube.function
def norm_grad_row(x, weight, g, out, row, n, eps, rms, has_weight, T, span, per, lanes, full, dw, db):
    """Writes the input gradient of the row at `row`; returns (dw + g * xhat, db + g) for this unit's
    columns."""
    d, inv = centred(resident_row(x, row, n, span, per, full, T), n, eps, rms, T, span, per, lanes, full)
    gv = resident_row(g, row, n, span, per, full, T)
    xhat = tuple(d[r] * inv for r in range(per))
    gw = gv
    if has_weight:
        w = resident_row(weight, 0, n, span, per, full, T)
        gw = tuple(gv[r] * w[r] for r in range(per))
    gx = masked(tuple(gw[r] * xhat[r] for r in range(per)), n, span, full, T)
    c = units_combine("sum", tuple_fold("sum", gx), span, lanes, T) / T(n)
    if not rms:
        a = units_combine("sum", tuple_fold("sum", masked(gw, n, span, full, T)), span, lanes, T) / T(n)
        gw = tuple(gw[r] - a for r in range(per))
    store_row(out, row, n, tuple((gw[r] - xhat[r] * c) * inv for r in range(per)), span, full)
    return tuple(dw[r] + gv[r] * xhat[r] for r in range(per)), tuple(db[r] + gv[r] for r in range(per))


@cube.kernel
def norm_grad_kernel(x: cube.Array, weight: cube.Array, g: cube.Array, out: cube.Array, part: cube.Array,
                     n: cube.i32, rows: cube.i32, eps: cube.f32, rms: cube.Comptime[bool],
                     has_weight: cube.Comptime[bool], T: cube.Comptime, units: cube.Comptime[int],
                     span: cube.Comptime[int], per: cube.Comptime[int], lanes: cube.Comptime[int],
                     full: cube.Comptime[bool]):
    # Each cube takes groups c, c + CUBE_COUNT, ... of `units // span` rows (one per row's units, held as
    # in the forward with the output's gradient g): it writes each row's input gradient to out and adds
    # g * xhat and g into per-column sums kept in registers (a unit owns the same columns in every row),
    # written at the end to part[c * units // span + the row's place in the group] (2n values: the
    # weight's, then the bias's); `partial_sums_kernel` adds the parts.
    group = units // span
    place = cube.UNIT_POS // span if span < units else 0
    dw = tuple(T(0) for _ in range(per))
    db = tuple(T(0) for _ in range(per))
    groups = (rows + group - 1) // group
    for k in range(0, (groups - cube.CUBE_POS + cube.CUBE_COUNT - 1) // cube.CUBE_COUNT):
        i = (cube.CUBE_POS + k * cube.CUBE_COUNT) * group + place
        if span == units:
            dw, db = norm_grad_row(x, weight, g, out, i * n, n, eps, rms, has_weight, T, span, per, lanes, full, dw,
                                   db)
        else:
            if i < rows:  # plane-uniform, as in the forward
                dw, db = norm_grad_row(x, weight, g, out, i * n, n, eps, rms, has_weight, T, span, per, lanes, full,
                                       dw, db)
    at = (cube.CUBE_POS * group + place) * 2 * n
    store_row(part, at, n, dw, span, full)
    store_row(part, at + n, n, db, span, full)


@cube.kernel
def partial_sums_kernel(part: cube.Array, out: cube.Array, parts: cube.i32, width: cube.i32, at: cube.i32,
                        T: cube.Comptime, lanes: cube.Comptime[int], slices: cube.Comptime[int]):
    # out[at + j] = the sum over p < parts of part[p * width + j]. A cube takes `lanes` columns (UNIT_POS_X,
    # consecutive: coalesced); its `slices` rows of units (UNIT_POS_Y) each sum every slices-th part, then
    # the first row adds the slices' sums (shared memory). One unit per column walking all the parts
    # would leave most of the GPU idle: a layer norm's few columns make only a handful of cubes.
    j = cube.CUBE_POS * lanes + cube.UNIT_POS_X
    acc = T(0)
    if j < width:
        for p in range(cube.UNIT_POS_Y, parts, slices):
            acc = acc + T(part[p * width + j])
    sums = cube.shared(T, lanes * slices)
    sums[cube.UNIT_POS_Y * lanes + cube.UNIT_POS_X] = acc
    cube.sync_units()
    if cube.UNIT_POS_Y == 0:
        if j < width:
            total = T(0)
            for y in cube.unroll(range(slices)):
                total = total + sums[y * lanes + cube.UNIT_POS_X]
            out[at + j] = out.dtype(total)


@cube.kernel
def norm_kernel(x: cube.Array, weight: cube.Array, bias: cube.Array, out: cube.Array, n: cube.i32,
                eps: cube.f32, rms: cube.Comptime[bool], has_weight: cube.Comptime[bool],
                has_bias: cube.Comptime[bool], T: cube.Comptime, units: cube.Comptime[int]):
    row = cube.CUBE_POS * n
    mean = T(0)
    if not rms:
        mean = block_reduce("sum", row_fold("sum", T(0), x, row, n, T(0), T, units), units) / T(n)
    inv = cube.rsqrt(block_reduce("sum", row_fold("sq", T(0), x, row, n, mean, T, units), units) / T(n) + T(eps))
    main = n - n % units
    for k in range(0, main, units):
        norm_at(x, weight, bias, out, row, k + cube.UNIT_POS, mean, inv, has_weight, has_bias, T)
    j = main + cube.UNIT_POS
    if j < n:
        norm_at(x, weight, bias, out, row, j, mean, inv, has_weight, has_bias, T)


def check_params(name: str, shape: tuple, weight: tuple | None, bias: tuple | None) -> None:
    """Raise `ShapeError` unless the shapes `weight` and `bias` (None: absent) are (n,) for the last dim
    n of an input of `shape`.

    Example:
        >>> check_params("layer_norm", (2, 4), (3,), None)
        Traceback (most recent call last):
        ember.errors.ShapeError: layer_norm: weight of shape (3,) does not match the last dim 4 of (2, 4)
    """
    n = shape[-1] if shape else 1
    for label, p in (("weight", weight), ("bias", bias)):
        if p is not None and tuple(p) != (n,):
            raise ShapeError(name, f"{label} of shape {tuple(p)} does not match the last dim {n} of {tuple(shape)}")


def norm(x: np.ndarray, weight, bias, eps: float, rms: bool) -> np.ndarray:
    """`rms_norm(x, weight, eps)` when `rms`, else `layer_norm(x, weight, bias, eps)` (None: no weight/bias).

    Example:
        >>> norm(np.array([[3.0, 4.0]], np.float32), None, None, 0.0, rms=True)
        array([[0.84852815, 1.1313709 ]], dtype=float32)
    """
    name = "rms_norm" if rms else "layer_norm"
    t = cube_dtype(x.dtype)
    if not t.is_float:
        raise DTypeError(f"{name} needs a float input, got {t.name}")
    n = x.shape[-1] if x.ndim else 1
    check_params(name, x.shape, None if weight is None else np.shape(weight), None if bias is None else np.shape(bias))
    x = contiguous(x)
    out = empty(x.shape, x.dtype, x)
    check_size(name, x)
    if x.size == 0:
        return out
    acc = accumulator("sum", t)
    w = contiguous(weight) if weight is not None else np.zeros(1, x.dtype)
    b = contiguous(bias) if bias is not None else np.zeros(1, x.dtype)
    rows = x.size // n
    flags = dict(rms=rms, has_weight=weight is not None, has_bias=bias is not None, T=acc)
    target = launch_target(x)
    resident = resident_shape(n, target) if target != "cpu" else None  # the C target keeps its vector rows
    if resident is not None:
        units, span, per, lanes = resident
        norm_resident_kernel.launch(cube.CubeCount(-(-rows // (units // span))), cube.CubeDim(units), x, w, b, out,
                                    n, rows, float(eps), **flags, units=units, span=span, per=per, lanes=lanes,
                                    full=n == span * per)
        return out
    units = row_units(n, acc, x)
    norm_kernel.launch(cube.CubeCount(rows), cube.CubeDim(units), x, w, b, out, n, float(eps), **flags, units=units)
    return out


def layer_norm(x: np.ndarray, weight=None, bias=None, eps: float = 1e-5) -> np.ndarray:
    """Normalize the last dim to zero mean and unit (biased) variance, then scale and shift."""
    return norm(x, weight, bias, eps, rms=False)


def rms_norm(x: np.ndarray, weight=None, eps: float = 1e-6) -> np.ndarray:
    """Divide the last dim by its root mean square, then scale."""
    return norm(x, weight, None, eps, rms=True)


GRAD_CUBES = 512
"""Cubes of `norm_grad` (at most): each sums the weight and bias gradients of its rows in registers."""
SUM_LANES, SUM_SLICES = 32, 8
"""`partial_sums_kernel`'s cube: columns side by side, slices of the parts each row of units sums."""


def norm_grad(x: np.ndarray, weight, g: np.ndarray, eps: float, rms: bool) -> np.ndarray:
    """The gradients of `norm(x, weight, bias, eps, rms)` from the output's gradient `g`, packed as one
    (rows + 2, n) array for x of rows x n elements (its last dim n): the input's gradient row by row,
    then the weight's sum(g * xhat) and the bias's sum(g) over the rows (xhat the normalized x).
    `weight` may be None. Rows of up to `reduce.resident_shape`'s length.

    Example:
        >>> norm_grad(np.array([[1.0, 3.0]]), None, np.array([[1.0, 0.0]]), 0.0, rms=False)
        array([[ 0.,  0.],
               [-1.,  0.],
               [ 1.,  0.]])
    """
    name = "rms_norm_grad" if rms else "layer_norm_grad"
    t = cube_dtype(x.dtype)
    if not t.is_float or g.dtype != x.dtype:
        raise DTypeError(f"{name} needs x and g of one float dtype, got {x.dtype} and {g.dtype}")
    if g.shape != x.shape or not x.ndim:
        raise ShapeError(name, f"needs x and g of one shape with at least one dimension, got {x.shape} and "
                         f"{g.shape}")
    n = x.shape[-1]
    check_params(name, x.shape, None if weight is None else np.shape(weight), None)
    resident = resident_shape(n, launch_target(x))
    if resident is None:
        raise ShapeError(name, f"rows of {n} elements are longer than a cube holds ({MAX_UNITS * RESIDENT_PER})")
    units, span, per, lanes = resident
    x, g = contiguous(x), contiguous(g)
    rows = x.size // n if n else 0
    out = empty((rows + 2, n), x.dtype, x, g)
    check_size(name, out)
    if out.size == 0:
        return out
    w = contiguous(weight) if weight is not None else np.zeros(1, x.dtype)
    acc = accumulator("sum", t)
    group = units // span
    cubes = min(-(-rows // group), GRAD_CUBES)
    parts = cubes * group  # no rows: no parts, and sums of zero terms
    part = empty((max(parts, 1), 2 * n), acc.np, x)
    if rows:
        norm_grad_kernel.launch(cube.CubeCount(cubes), cube.CubeDim(units), x, w, g, out, part, n, rows, float(eps),
                                rms=rms, has_weight=weight is not None, T=acc, units=units, span=span, per=per,
                                lanes=lanes, full=n == span * per)
    partial_sums_kernel.launch(cube.CubeCount(-(-2 * n // SUM_LANES)), cube.CubeDim(SUM_LANES, SUM_SLICES), part, out,
                               parts, 2 * n, rows * n, T=acc, lanes=SUM_LANES, slices=SUM_SLICES)
    return out
