"""Reductions over any set of dims: sum, mean, prod, amax, amin, argmax, argmin, var.

The kept and reduced dims are each merged where their strides allow (any layout, no copies), then the
shape of the kernel follows the layout and the target (`launch_target`: the runtime of the array,
`cuda`, `wgsl`, or `cpu` for the C target):

- **contiguous rows** (the innermost reduced dim has stride 1 and at least `SHORT_ROW` elements),
  `rows_kernel`: a plane (warp) per row on GPU targets, 8 rows per cube, combined with plane ops; on the
  C target a cube of one vector of units per row, then a tree in shared memory (`block_reduce`);
- **strided reductions** (the reduced axis is not the contiguous one, short rows), `columns_kernel`:
  one unit per output looping over the reduced positions, consecutive units on consecutive outputs;
- argmax/argmin over rows: `arg_rows_kernel`, a cube per row and a tree of (value, index) pairs.

Launches with few cubes (fewer than `MIN_CUBES`) and large work split the reduced range over up to
`MAX_SPLITS` cubes per output (partials, reduced by a second call); never under `SPLIT_TOTAL` elements.
Accumulation: sums and products of f16/bf16 in f32, of ints and bools in i64 (NumPy's default);
amax/amin in the input dtype. Ties in argmax/argmin go to the first index; NaN counts as the largest
value for amax/argmax and the smallest for amin/argmin (as NumPy propagates it). Op names are ember's
primitive names. `block_reduce` and `combine` are shared with softmax, the norms and the fusion
codegen. Why these shapes, with figures: docs/cube.md, "Reductions and softmax".

Example:
    >>> reduce("sum", np.ones((2, 3), np.float32), dims=(1,))
    array([3., 3.], dtype=float32)
"""

from __future__ import annotations

import math

import numpy as np

from .. import cube
from ..dtype import bool_, f32, f64, i64
from ..errors import DTypeError, ShapeError
from .elementwise import binary
from ..cube.kernel import launch_runtime
from .common import asarray, check_size, contiguous, cube_dtype, empty
from .layout import element_strides, merge_dims, offset

OPS = ("sum", "mean", "prod", "amax", "amin", "argmax", "argmin", "var")
KERNEL_OP = {"amax": "max", "amin": "min"}  # the name `combine` and `identity` use
MAX_UNITS = 256
# Long reductions with few cubes are split over up to MAX_SPLITS cubes per output, each folding at
# least SPLIT_CHUNK elements (`_splits`; the fusion codegen splits those with under FEW_OUTPUTS
# outputs), so that a full reduction of a large array uses every core.
FEW_OUTPUTS, MAX_SPLITS, SPLIT_CHUNK = 64, 64, 16384
SPLIT_TOTAL = 1 << 20  # smaller reductions are not split (the second launch would cost more)
# Targets whose planes are wider than one unit (a warp on CUDA): a plane reduces a row there. WGSL's
# subgroup width is the device's and may be 1, so it takes the C target's shape.
PLANE_WIDTH = {"cuda": 32}
# Contiguous rows shorter than this reduce with one unit per output (the columns shape): a cube or a
# plane per row of 10 (cross-entropy over classes) is mostly idle units and tree steps.
SHORT_ROW = 32
# The cubes a launch should have (all cores / SMs busy) before long reductions are split further.
MIN_CUBES = {"cpu": 16, "wgsl": 64, "cuda": 1024}
# Bytes a row's units read at once on targets without planes (the C target: two AVX2 vectors).
VEC = {"cpu": 64, "wgsl": 256}
# Elements per unit of a row held in registers (`resident_shape`): rows up to MAX_UNITS * RESIDENT_PER
# (8192) are read once by the GPU softmax and norms; longer rows take their three-pass kernels.
RESIDENT_PER = 32


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
    # Nested selects, not `b > a or b != b`: the C target's bool `or` keeps gcc from vectorizing.
    if op == "max":
        return cube.select(b != b, b, cube.select(b > a, b, a))
    if op == "min":
        return cube.select(b != b, b, cube.select(b < a, b, a))
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
def arg_step(op, best, best_i, v, r):
    """(best, best_i) after meeting element `v` at reduced position `r`."""
    take = arg_better(op, best, best_i, v, r)
    return cube.select(take, v, best), cube.select(take, r, best_i)


@cube.function
def plane_combine(op, v, lanes, T):
    """`v` combined over the `lanes` units of a plane (every lane gets the result); `lanes == 1` is `v`.
    max/min propagate NaN as `combine` does (a plane op alone would depend on the lane order)."""
    if lanes == 1:
        return v
    if op == "sum":
        return cube.plane_sum(v)
    if op == "prod":
        return cube.plane_prod(v)
    r = cube.plane_max(v) if op == "max" else cube.plane_min(v)
    if T.is_float:
        r = cube.select(cube.plane_any(v != v), T(np.nan), r)
    return r


@cube.function
def fold_in(kind, acc, v, mean):
    """`v` folded into an accumulator: `combine` for an op name, the centred square for "sq"."""
    if kind == "sq":
        d = v - mean
        return acc + d * d
    return combine(kind, acc, v)


@cube.function
def tuple_fold(kind, acc):
    """The partial accumulators of a unit (a power of two of them) folded into one (a comptime tree)."""
    for h in halvings(len(acc)):
        acc = tuple(combine("sum" if kind == "sq" else kind, acc[j], acc[j + h]) for j in range(h))
    return acc[0]


@cube.function
def lane_fold(kind, x, base, start, stop, lane, lanes, vec, mean, T):
    """This lane's fold of x[base + start : base + stop]: whole rounds of `lanes * vec` elements into
    `vec` independent accumulators (consecutive elements: one vector on the C target, coalesced
    across the lanes of a plane on GPUs), then the tail; the lanes' partials still need `plane_combine`."""
    ident = T(identity("sum" if kind == "sq" else kind, T))
    step = lanes * vec
    main = start + (stop - start) // step * step
    acc = tuple(ident for _ in range(vec))
    for k in range(start, main, step):
        acc = tuple(fold_in(kind, acc[j], T(x[base + k + j * lanes + lane]), mean) for j in range(vec))
    total = tuple_fold(kind, acc)
    for k in range(main + lane, stop, lanes):
        total = fold_in(kind, total, T(x[base + k]), mean)
    return total


@cube.function
def lanes_combine(kind, v, lanes, units, T):
    """`v` combined over the `lanes` units that share a row: the whole cube (`lanes == units`, a tree in
    shared memory) or a plane (`plane_combine`)."""
    if lanes == units:
        return block_reduce(kind, v, units)
    return plane_combine(kind, v, lanes, T)


@cube.function
def units_combine(op, v, span, lanes, T):
    """`v` combined over the `span` units that share a row (every one of them getting the result): a
    plane (`span == lanes`: plane ops alone), or the whole cube (`span` = its units): with planes
    (`lanes` > 1) a plane op, then the planes' results through shared memory; without (`lanes == 1`),
    `block_reduce`'s tree."""
    if lanes == 1:
        return block_reduce(op, v, span)
    r = plane_combine(op, v, lanes, T)
    planes = span // lanes
    if planes == 1:
        return r
    sh = cube.shared(T, planes)
    if cube.UNIT_POS % lanes == 0:
        sh[cube.UNIT_POS // lanes] = r
    cube.sync_units()
    total = sh[0]
    for p in cube.unroll(range(1, planes)):
        total = combine(op, total, sh[p])
    cube.sync_units()  # every unit has read the slots before the shared memory can be reused
    return total


def resident_shape(n: int, target: str) -> tuple | None:
    """(units, span, per, lanes) of cubes that hold whole rows of `n` elements in their units' registers:
    `span` units share a row (the whole cube of `units`, or one plane of `lanes` units on targets with
    planes wider than one unit, for rows up to `lanes * RESIDENT_PER`: `units // span` rows per cube),
    `per` elements each (a power of two). For the single-read softmax and norms (the GPU targets'
    forward; their gradients); None for rows over MAX_UNITS * RESIDENT_PER.

    Example:
        >>> resident_shape(8192, "cuda"), resident_shape(768, "cuda"), resident_shape(100, "wgsl")
        ((256, 256, 32, 32), (256, 32, 32, 32), (32, 32, 4, 1))
    """
    if n > MAX_UNITS * RESIDENT_PER:
        return None
    lanes = PLANE_WIDTH.get(target, 1)
    if lanes > 1 and n <= lanes * RESIDENT_PER:
        return MAX_UNITS, lanes, 1 << max(0, -(-n // lanes) - 1).bit_length(), lanes
    units = 32 if n <= 32 * 8 else MAX_UNITS
    return units, units, 1 << max(0, -(-n // units) - 1).bit_length(), lanes


@cube.function
def runs_fold(kind, x, base, o0, o1, red, odim, start, stop, lane, lanes, vec, mean, T):
    """This lane's fold over the contiguous runs x[base + offset(o) + start : ... + stop] for the outer
    reduced positions o in [o0, o1) (`red`: their layout; odim == 0: the one run at base)."""
    if odim == 0:
        return lane_fold(kind, x, base, start, stop, lane, lanes, vec, mean, T)
    outer_kind = "sum" if kind == "sq" else kind
    total = T(identity(outer_kind, T))
    for o in range(o0, o1):
        run = lane_fold(kind, x, base + offset(o, red, odim, 0), start, stop, lane, lanes, vec, mean, T)
        total = combine(outer_kind, total, run)
    return total


@cube.function
def row_total(op, x, base, o0, o1, red, odim, start, stop, count, lane, lanes, units, vec, correction, T):
    """`op` over the runs of a row by its `lanes` units (mean and var divide by `count`)."""
    kind = "sum" if op in ("mean", "var") else op
    part = runs_fold(kind, x, base, o0, o1, red, odim, start, stop, lane, lanes, vec, T(0), T)
    total = lanes_combine(kind, part, lanes, units, T)
    if op == "mean":
        total = total / T(count)
    if op == "var":
        mean = total / T(count)
        sq = runs_fold("sq", x, base, o0, o1, red, odim, start, stop, lane, lanes, vec, mean, T)
        total = lanes_combine("sum", sq, lanes, units, T) / T(count - correction)
    return total


@cube.kernel
def rows_kernel(x: cube.Array, out: cube.Array, kept: cube.Array[cube.i32], red: cube.Array[cube.i32],
                rows: cube.i32, n: cube.i32, outer: cube.i32, op: cube.Comptime[str], T: cube.Comptime,
                kdim: cube.Comptime[int], odim: cube.Comptime[int], dense: cube.Comptime[bool],
                units: cube.Comptime[int], lanes: cube.Comptime[int], vec: cube.Comptime[int],
                correction: cube.Comptime[int] = 0):
    # `lanes` units per row: a plane on GPU targets (the cube holds units / lanes rows), the whole cube
    # on the C target (its unit loop is the vector accumulator). A row is `outer` contiguous runs of
    # `n` elements (`red` gives the runs' offsets; odim == 0: one run). CUBE_POS_Y splits a row: over
    # its runs, or over its one long run; each of the CUBE_COUNT_Y cubes of a row folds one chunk and
    # writes a partial result to out[row * CUBE_COUNT_Y + split].
    row = cube.CUBE_POS_X * (units // lanes) + (cube.UNIT_POS // lanes if units > lanes else 0)
    lane = cube.UNIT_POS % lanes if units > lanes else cube.UNIT_POS
    split = cube.CUBE_POS_Y
    if odim == 0:
        step = lanes * vec
        chunk = (n + cube.CUBE_COUNT_Y * step - 1) // (cube.CUBE_COUNT_Y * step) * step
        start = cube.min(n, split * chunk)
        stop = cube.min(n, start + chunk)
        o0 = 0
        o1 = 1
    else:
        start = 0
        stop = n
        ochunk = (outer + cube.CUBE_COUNT_Y - 1) // cube.CUBE_COUNT_Y
        o0 = cube.min(outer, split * ochunk)
        o1 = cube.min(outer, o0 + ochunk)
    o = row * cube.CUBE_COUNT_Y + split
    if lanes == units:
        base = row * n if dense else offset(row, kept, kdim, 0)
        total = row_total(op, x, base, o0, o1, red, odim, start, stop, n * outer, lane, lanes, units, vec,
                          correction, T)
        if lane == 0:
            out[o] = cube.cast(total, out.dtype)
    else:
        if row < rows:
            base = row * n if dense else offset(row, kept, kdim, 0)
            total = row_total(op, x, base, o0, o1, red, odim, start, stop, n * outer, lane, lanes, units, vec,
                              correction, T)
            if lane == 0:
                out[o] = cube.cast(total, out.dtype)


@cube.function
def at_r(x, at, r, red, rdim, rstep, T):
    """Reduced element `r` of the output whose first element is x[at], as T."""
    return T(x[at + (r * rstep if rdim == 1 else offset(r, red, rdim, 0))])


@cube.function
def column_body(x, out, at, red, rdim, rstep, start, stop, o, op, T, correction, n):
    """Unit-per-output fold of the reduced elements r in [start, stop), written to out[o]; four
    reduced positions per round (four independent loads in flight)."""
    if op in ("argmax", "argmin"):
        best = T(identity(op, T))
        best_i = cube.i32(2**31 - 1)
        for r in range(start, stop):
            best, best_i = arg_step(op, best, best_i, at_r(x, at, r, red, rdim, rstep, T), r)
        out[o] = cube.i64(best_i)
    else:
        kind = "sum" if op in ("mean", "var") else op
        acc = T(identity(kind, T))
        main = start + (stop - start) // 4 * 4
        for r in range(start, main, 4):
            v = [at_r(x, at, r + j, red, rdim, rstep, T) for j in range(4)]
            acc = combine(kind, acc, combine(kind, combine(kind, v[0], v[1]), combine(kind, v[2], v[3])))
        for r in range(main, stop):
            acc = combine(kind, acc, at_r(x, at, r, red, rdim, rstep, T))
        if op == "mean":
            acc = acc / T(n)
        if op == "var":
            mean = acc / T(n)
            sq = T(0)
            for r in range(start, stop):
                d = at_r(x, at, r, red, rdim, rstep, T) - mean
                sq += d * d
            acc = sq / T(n - correction)
        out[o] = cube.cast(acc, out.dtype)


@cube.kernel
def columns_kernel(x: cube.Array, out: cube.Array, kept: cube.Array[cube.i32], red: cube.Array[cube.i32],
                   width: cube.i32, n: cube.i32, col0: cube.i32, blocks: cube.i32, op: cube.Comptime[str],
                   T: cube.Comptime, kdim: cube.Comptime[int], rdim: cube.Comptime[int],
                   unit_step: cube.Comptime[bool], guarded: cube.Comptime[bool], correction: cube.Comptime[int] = 0):
    # One unit per output: a cube covers CUBE_DIM consecutive outputs of one line (the last kept dim,
    # `width` long, from column `col0`, `blocks` cubes per line) and each unit loops over the reduced
    # positions, whose offsets are the same for all units (computed once per cube on the C target);
    # consecutive units read consecutive elements when the last kept dim has stride 1 (`unit_step`).
    # Without `guarded` every unit has a column (no branch: the C target keeps the reduced loop
    # outside the unit loop, which it vectorizes). CUBE_POS_Y splits the reduced range.
    line = cube.CUBE_POS_X // blocks
    col = col0 + (cube.CUBE_POS_X % blocks) * cube.CUBE_DIM + cube.UNIT_POS
    chunk = (n + cube.CUBE_COUNT_Y - 1) // cube.CUBE_COUNT_Y
    start = cube.min(n, cube.CUBE_POS_Y * chunk)
    stop = cube.min(n, start + chunk)
    first = line * width
    at = offset(first, kept, kdim, 0) + (col if unit_step else col * kept[2 * kdim - 1])
    rstep = red[1] if rdim == 1 else 0
    o = (first + col) * cube.CUBE_COUNT_Y + cube.CUBE_POS_Y
    if guarded:
        if col < width:
            column_body(x, out, at, red, rdim, rstep, start, stop, o, op, T, correction, n)
    else:
        column_body(x, out, at, red, rdim, rstep, start, stop, o, op, T, correction, n)


@cube.kernel
def arg_rows_kernel(x: cube.Array, out: cube.Array[cube.i64], kept: cube.Array[cube.i32], n: cube.i32,
                    op: cube.Comptime[str], T: cube.Comptime, kdim: cube.Comptime[int], dense: cube.Comptime[bool],
                    units: cube.Comptime[int]):
    # One cube per contiguous row: its units stride over the row (whole strides unguarded, then the
    # tail; on the C target one vector of units) and combine (value, index) pairs in shared memory.
    pos = cube.CUBE_POS
    base = pos * n if dense else offset(pos, kept, kdim, 0)
    best = T(identity(op, T))
    best_i = cube.i32(2**31 - 1)
    main = n - n % units
    for k in range(0, main, units):
        best, best_i = arg_step(op, best, best_i, T(x[base + k + cube.UNIT_POS]), k + cube.UNIT_POS)
    if main + cube.UNIT_POS < n:
        best, best_i = arg_step(op, best, best_i, T(x[base + main + cube.UNIT_POS]), main + cube.UNIT_POS)
    if units > 1:
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
        best_i = index[0]
    if cube.UNIT_POS == 0:
        out[pos] = cube.i64(best_i)


def accumulator(op: str, dtype):
    """The dtype `op` accumulates `dtype` in."""
    if op in ("amax", "amin", "argmax", "argmin"):
        return dtype
    if not dtype.is_float:
        return i64
    return f64 if dtype is f64 else f32 if dtype.itemsize < 4 else dtype


def launch_target(x) -> str:
    """The cube target a launch on `x` compiles for: its runtime's (`cuda`, `wgsl`), else `cpu` (C)."""
    return launch_runtime(x).target


def _merged(x, dims: tuple) -> tuple[list, list]:
    """`x`'s `dims` (sizes, element strides) with adjacent dims merged; at least one dim."""
    shape, (strides,) = merge_dims([x.shape[d] for d in dims], [[element_strides(x)[d] for d in dims]])
    return (shape, strides) if shape else ([1], [0])


def _splits(op: str, cubes: int, work: int, target: str) -> int:
    """Cubes per output group for a launch of `cubes` cubes that each fold `work` elements: enough to
    fill the machine (`MIN_CUBES`), each split still folding at least SPLIT_CHUNK elements."""
    if op in ("var", "argmax", "argmin") or cubes * work < SPLIT_TOTAL:
        return 1
    want = -(-MIN_CUBES.get(target, MIN_CUBES["cpu"]) // cubes)
    return max(1, min(MAX_SPLITS, want, work // SPLIT_CHUNK))


def row_units(n: int, acc_t, x) -> int:
    """Units of a cube that reduces a row of `n` elements accumulated in `acc_t` (softmax, norms) on
    the target of `x`: one vector of units on the C target (64 bytes: whole strides vectorize, the
    tree has 4 steps, and no unit idles on short rows), else the
    smallest unit class holding n.

    Example:
        >>> row_units(4096, f32, np.zeros(1)), row_units(4096, f64, np.zeros(1))
        (16, 8)
    """
    target = launch_target(x)
    return VEC[target] // acc_t.itemsize if target == "cpu" else units_for(n)


def column_launches(width: int, target: str) -> list[tuple]:
    """How the columns shape covers lines of `width` outputs: (cubes per line, first column, units,
    guarded) per launch. The C target runs the whole cubes of each line unguarded, in the largest unit
    class that fits the line (from 32), then the rest of each line guarded (a second launch); other targets run
    one guarded launch. (A line of 64 in one guarded cube of 256 kept the reduced loop inside the unit
    loop, unvectorized: a (2048, 64) bias gradient took 83 us on one Zen 4 thread.)

    Example:
        >>> column_launches(300, "cpu"), column_launches(64, "cpu"), column_launches(300, "cuda")
        ([(1, 0, 256, False), (1, 256, 256, True)], [(2, 0, 32, False)], [(2, 0, 256, True)])
    """
    fits = [u for u in UNIT_CLASSES[1:] if u <= width]  # lines under 32: one guarded launch costs less
    units = fits[-1] if target == "cpu" and fits else units_for(width)
    full = width // units if target == "cpu" else 0
    parts = [(full, 0, units, False)] if full else []
    if full * units < width:
        rest = width - full * units
        tail = units_for(rest) if full else units
        parts.append((-(-rest // tail), full * units, tail, True))
    return parts


def _launch(op, x, out, n, kshape, kstrides, rshape, rstrides, acc_t, target, splits_ok, correction):
    """Run the shape that fits the layout; returns the number of splits (partials per output in `out`)
    or None when `out` is too small for them (the caller allocates partials and calls again)."""
    kept = np.asarray(kshape + kstrides, np.int32)
    size = math.prod(kshape)
    plane = PLANE_WIDTH.get(target, 1)
    if rstrides[-1] == 1 and rshape[-1] >= SHORT_ROW:  # rows of contiguous runs
        inner, odim = rshape[-1], len(rshape) - 1
        dense = odim == 0 and (len(kshape) == 1 and kstrides[0] == n or size == 1)
        if op.startswith("arg"):  # one reduced dim: odim == 0
            units = units_for(n) if plane > 1 else VEC.get(target, 64) // acc_t.itemsize
            arg_rows_kernel.launch(cube.CubeCount(size), cube.CubeDim(units), x, out, kept, n, op=op, T=acc_t,
                                   kdim=len(kshape), dense=dense, units=units)
            return 1
        # GPU targets: a plane per row, 8 rows per cube; the C target: a cube per row, one vector of units
        units = MAX_UNITS if plane > 1 else VEC.get(target, 64) // acc_t.itemsize
        lanes = plane if plane > 1 else units
        per = units // lanes
        cubes = -(-size // per)
        splits = _splits(op, cubes, n * per, target) if splits_ok else 1
        if splits > 1 and out.size < size * splits:
            return splits
        red = np.asarray(rshape[:-1] + rstrides[:-1], np.int32) if odim else np.zeros(2, np.int32)
        rows_kernel.launch(cube.CubeCount(cubes, splits), cube.CubeDim(units), x, out, kept, red, size, inner,
                           n // inner, op=KERNEL_OP.get(op, op), T=acc_t, kdim=len(kshape), odim=odim, dense=dense,
                           units=units, lanes=lanes, vec=4 if plane > 1 else 1, correction=correction)
        return splits
    width = kshape[-1]
    units = units_for(width)
    lines = size // width
    splits = _splits(op, lines * -(-width // units), n * units, target) if splits_ok else 1
    if splits > 1 and out.size < size * splits:
        return splits
    red = np.asarray(rshape + rstrides, np.int32)
    for blocks, col0, dim, guarded in column_launches(width, target):
        columns_kernel.launch(cube.CubeCount(lines * blocks, splits), cube.CubeDim(dim), x, out, kept, red, width,
                              n, col0, blocks, op=KERNEL_OP.get(op, op), T=acc_t, kdim=len(kshape),
                              rdim=len(rshape), unit_step=kstrides[-1] == 1, guarded=guarded,
                              correction=correction)
    return splits


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
    target = launch_target(x)
    acc_t = accumulator(op, t)
    kshape, kstrides = _merged(x, kept)
    rshape, rstrides = _merged(x, dims)
    layout = (n, kshape, kstrides, rshape, rstrides, acc_t, target)
    splits = _launch(op, x, out, *layout, True, correction if op == "var" else 0)
    if splits == 1:
        return out
    # Few outputs, long reductions: spread each over `splits` cubes, then reduce the partials.
    partial = empty(out.size * splits, acc_t.np, x)
    stage = "sum" if op == "mean" else op
    _launch(stage, x, partial, *layout, True, 0)
    total = reduce(stage, partial.reshape(out.size, splits), dims=1)
    if op == "mean":
        total = binary("div", total, np.full(1, n, total.dtype))
    return total.reshape(out.shape).astype(out.dtype, copy=False)
