"""Reductions over any set of dims: sum, mean, prod, amax, amin, argmax, argmin, var.

One cube reduces one output element. Its units stride over the reduced elements, each folding a
partial result, and then combine partials with a tree in shared memory (`block_reduce`, which
softmax and the norms reuse). The reduced and kept dims are read through layouts (shape + strides),
so a transposed or sliced input needs no copy; when the reduced dims are the trailing dims of a
C-contiguous input, a comptime fast path indexes directly.

Accumulation: sums and products of f16/bf16 in f32, of ints and bools in i64 (NumPy's default);
amax/amin in the input dtype. Ties in argmax/argmin go to the first index; NaN counts as the largest
value for amax/argmax and the smallest for amin/argmin (NumPy propagates NaN the same way). Op names
are ember's primitive names.

Example:
    >>> reduce("sum", np.ones((2, 3), np.float32), dims=(1,))
    array([3., 3.], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from ... import cube
from ...dtype import bool_, f32, f64, i64
from ...errors import DTypeError, ShapeError
from .elementwise import binary
from .common import asarray, check_size, contiguous, cube_dtype, element_strides, empty, offset

OPS = ("sum", "mean", "prod", "amax", "amin", "argmax", "argmin", "var")
_KERNEL_OP = {"amax": "max", "amin": "min"}  # the name `combine` and `identity` use
MAX_UNITS = 256
# A reduction with fewer than FEW_OUTPUTS outputs is split over up to MAX_SPLITS cubes per output,
# one per SPLIT_CHUNK elements, so that a full reduction of a large array uses every core.
FEW_OUTPUTS, MAX_SPLITS, SPLIT_CHUNK = 64, 64, 16384


# Units per cube come in three size classes rather than every power of two: each class is a kernel
# specialization (a gcc run on a cold cache), and idle units cost a few SIMD lanes at most 8x over.
UNIT_CLASSES = (4, 32, MAX_UNITS)


def units_for(n: int) -> int:
    """The units of a cube that reduces `n` elements: the smallest class holding n (at most MAX_UNITS).

    Example:
        >>> units_for(3), units_for(20), units_for(10**6)
        (4, 32, 256)
    """
    return next((u for u in UNIT_CLASSES if u >= n), MAX_UNITS)


def halvings(n: int) -> list:
    """n/2, n/4, ..., 1: the strides of a tree reduction over n (a power of two) slots."""
    return [n >> (k + 1) for k in range(n.bit_length() - 1)]


def identity(op: str, dtype) -> float | int | bool:
    """The value that leaves `op`'s accumulator unchanged."""
    if op in ("sum", "mean", "var"):
        return 0
    if op == "prod":
        return 1
    lowest = op in ("max", "argmax")
    if dtype.is_float:
        return -np.inf if lowest else np.inf
    if dtype is bool_:
        return not lowest
    info = np.iinfo(dtype.np)
    return int(info.min if lowest else info.max)


@cube.function
def combine(op, a, b):
    if op == "max":
        return cube.select(b > a or b != b, b, a)
    if op == "min":
        return cube.select(b < a or b != b, b, a)
    if op == "prod":
        return a * b
    return a + b


@cube.function
def arg_better(op, a, ia, b, ib):
    """True when (b, ib) beats (a, ia): a larger (or smaller) value, NaN first, then the lower index."""
    a_nan = a != a
    b_nan = b != b
    beats = b > a if op == "argmax" else b < a
    tie = (b == a) or (a_nan and b_nan)
    return (beats and not a_nan) or (b_nan and not a_nan) or (tie and ib < ia)


@cube.function
def block_reduce(op, value, units):
    """Combine `value` over the `units` units of the cube; every unit gets the result."""
    sh = cube.shared(value.dtype, units)
    sh[cube.UNIT_POS] = value
    cube.sync_units()
    for s in halvings(units):
        if cube.UNIT_POS < s:
            sh[cube.UNIT_POS] = combine(op, sh[cube.UNIT_POS], sh[cube.UNIT_POS + s])
        cube.sync_units()
    result = sh[0]
    cube.sync_units()  # everyone has read slot 0 before the shared memory can be reused
    return result


@cube.function
def element(x, base, r, red, rdim, dense, T):
    """The r-th reduced element of the current output, converted to the accumulator type T."""
    return cube.cast(x[base + (r if dense else offset(r, red, rdim, 0))], T)


@cube.kernel
def reduce_kernel(x: cube.Array, out: cube.Array, kept: cube.Array[cube.i32], red: cube.Array[cube.i32],
                  n: cube.i32, op: cube.Comptime[str], T: cube.Comptime, kdim: cube.Comptime[int],
                  rdim: cube.Comptime[int], dense: cube.Comptime[bool], units: cube.Comptime[int],
                  correction: cube.Comptime[int] = 0):
    # CUBE_POS_Y splits a long reduction: each of the CUBE_COUNT_Y cubes of an output folds one chunk
    # and writes a partial result to out[pos * CUBE_COUNT_Y + split] (the host reduces the partials).
    pos = cube.CUBE_POS_X
    split = cube.CUBE_POS_Y
    chunk = (n + cube.CUBE_COUNT_Y - 1) // cube.CUBE_COUNT_Y
    stop = cube.min(n, (split + 1) * chunk)
    base = pos * n if dense else offset(pos, kept, kdim, 0)
    acc = T(identity("sum" if op in ("mean", "var") else op, T))
    for k in range(split * chunk, stop, units):
        r = k + cube.UNIT_POS
        if r < stop:
            acc = combine(op, acc, element(x, base, r, red, rdim, dense, T))
    total = block_reduce(op, acc, units)
    if op == "mean":
        total = total / T(n)
    if op == "var":
        mean = total / T(n)
        sq = T(0)
        for k in range(0, n, units):
            r = k + cube.UNIT_POS
            if r < n:
                d = element(x, base, r, red, rdim, dense, T) - mean
                sq += d * d
        total = block_reduce("sum", sq, units) / T(n - correction)
    if cube.UNIT_POS == 0:
        out[pos * cube.CUBE_COUNT_Y + split] = cube.cast(total, out.dtype)


@cube.kernel
def arg_reduce_kernel(x: cube.Array, out: cube.Array[cube.i64], kept: cube.Array[cube.i32],
                      red: cube.Array[cube.i32], n: cube.i32, op: cube.Comptime[str], T: cube.Comptime,
                      kdim: cube.Comptime[int], rdim: cube.Comptime[int], dense: cube.Comptime[bool],
                      units: cube.Comptime[int]):
    pos = cube.CUBE_POS
    base = pos * n if dense else offset(pos, kept, kdim, 0)
    best = T(identity(op, T))
    best_i = cube.i32(2**31 - 1)
    for k in range(0, n, units):
        r = k + cube.UNIT_POS
        if r < n:
            v = element(x, base, r, red, rdim, dense, T)
            take = arg_better(op, best, best_i, v, r)
            best = cube.select(take, v, best)
            best_i = cube.select(take, r, best_i)
    values = cube.shared(T, units)
    index = cube.shared(cube.i32, units)
    values[cube.UNIT_POS] = best
    index[cube.UNIT_POS] = best_i
    cube.sync_units()
    for s in halvings(units):
        if cube.UNIT_POS < s:
            other = cube.UNIT_POS + s
            if arg_better(op, values[cube.UNIT_POS], index[cube.UNIT_POS], values[other], index[other]):
                values[cube.UNIT_POS] = values[other]
                index[cube.UNIT_POS] = index[other]
        cube.sync_units()
    if cube.UNIT_POS == 0:
        out[pos] = cube.i64(index[0])


def accumulator(op: str, dtype):
    """The dtype `op` accumulates `dtype` in."""
    if op in ("amax", "amin", "argmax", "argmin"):
        return dtype
    if not dtype.is_float:
        return i64
    return f64 if dtype is f64 else f32 if dtype.itemsize < 4 else dtype


def _layout(x: np.ndarray, dims: tuple) -> np.ndarray:
    strides = element_strides(x)
    return np.asarray([x.shape[d] for d in dims] + [strides[d] for d in dims], np.int32).reshape(-1)


def reduce(op: str, x: np.ndarray, dims=None, keepdim: bool = False, correction: int = 1) -> np.ndarray:
    """Reduce `x` over `dims` (all when None) with `op`; `var` divides by `n - correction`.

    argmax/argmin take at most one dim (None means over the flattened array) and give i64.

    Example:
        >>> reduce("argmax", np.array([[1, 5], [7, 2]]), dims=1)
        array([1, 0])
    """
    if op not in OPS:
        raise ValueError(f"unknown reduction {op!r}; known: {', '.join(OPS)}")
    x = asarray(x)
    t = cube_dtype(x.dtype)
    if op in ("mean", "var") and not t.is_float:
        raise DTypeError(f"{op} needs a float input, got {t.name}")
    if op.startswith("arg") and dims is None:
        return reduce(op, contiguous(x).reshape(-1), 0)
    dims = tuple(range(x.ndim)) if dims is None else (dims,) if isinstance(dims, int) else tuple(dims)
    dims = tuple(sorted({d % x.ndim for d in dims})) if x.ndim else ()
    if op.startswith("arg") and len(dims) != 1:
        raise ShapeError(op, f"reduces over one dim, got {dims}")
    kept = tuple(d for d in range(x.ndim) if d not in dims)
    n = int(np.prod([x.shape[d] for d in dims], dtype=np.int64))
    out_shape = tuple(1 if d in dims else x.shape[d] for d in range(x.ndim)) if keepdim \
        else tuple(x.shape[d] for d in kept)
    out_t = i64 if op.startswith("arg") else accumulator(op, t) if not t.is_float else t
    out = empty(out_shape, out_t.np, x)
    if n == 0 and op in ("amax", "amin", "argmax", "argmin"):
        raise ShapeError(op, f"cannot reduce an empty dim of {x.shape} with {op}")
    check_size(op, x, out)
    if out.size == 0:
        return out
    units = units_for(n)
    dense = x.flags.c_contiguous and dims == tuple(range(len(kept), x.ndim))
    layouts = (_layout(x, kept), _layout(x, dims), n)
    acc_t = accumulator(op, t)
    if op.startswith("arg"):
        arg_reduce_kernel.launch(cube.CubeCount(out.size), cube.CubeDim(units), x, out, *layouts, op=op,
                                 T=acc_t, kdim=len(kept), rdim=len(dims), dense=dense, units=units)
        return out
    splits = min(MAX_SPLITS, n // SPLIT_CHUNK) if out.size < FEW_OUTPUTS and op != "var" else 1
    if splits <= 1:
        reduce_kernel.launch(cube.CubeCount(out.size), cube.CubeDim(units), x, out, *layouts,
                             op=_KERNEL_OP.get(op, op), T=acc_t, kdim=len(kept), rdim=len(dims), dense=dense,
                             units=units, correction=correction if op == "var" else 0)
        return out
    # Few outputs, long reductions: spread each over `splits` cubes, then reduce the partials.
    partial = empty(out.size * splits, acc_t.np, x)
    stage = "sum" if op == "mean" else op
    reduce_kernel.launch(cube.CubeCount(out.size, splits), cube.CubeDim(units), x, partial, *layouts,
                         op=_KERNEL_OP.get(stage, stage), T=acc_t, kdim=len(kept), rdim=len(dims),
                         dense=dense, units=units)
    total = reduce(stage, partial.reshape(out.size, splits), dims=1)
    if op == "mean":
        total = binary("div", total, np.full(1, n, total.dtype))
    return total.reshape(out.shape).astype(out.dtype, copy=False)

