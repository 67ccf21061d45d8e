"""Fused kernels: a normalized elementwise program becomes one cube kernel, built as IR directly.

- elementwise kernel (`run_elementwise`): the kernel library's generator
  (`ember.kernels.elementwise`), which the Cube backend's lone elementwise ops run through too.
- reduce kernels (fuse-on-read, `run_reduction`), in the kernel library's shapes
  (`kernels/reduce.py`), chosen by layout and target: rows (`reduce_kernel`) when the reduced
  positions are contiguous in the largest input and at least `SHORT_ROW` long, else columns
  (`columns_kernel`, one unit per output); both split over several cubes when there are few outputs.

Each step inlines the op table's cube expressions (`elementwise.emit`) and the kernel library's
cube functions (`offset`, `combine`, `block_reduce`) into an `ir.Builder`, so op semantics are the
library's. Why IR rather than a `@cube.kernel`, and the kernel shapes per target: docs/fusion.md, "Generated
kernels".

Example:
    >>> p = Program((f32,), (("exp", (), (0,), f32),), (1,))
    >>> run_reduction(Reduction(p, 1, "sum", (0,), f32), (3,), [np.zeros(3, np.float32)])
    array(3., dtype=float32)
"""

from __future__ import annotations

import math

import numpy as np

from .... import cube
from ....cube import ir
from ....cube.frontend import ArrayRef
from ....kernels.common import empty
from ....kernels.elementwise import (SCALAR, STRIDED, UNIT, Program, compiled_kernel, input_params, line_reads,
                                         program_values, read_modes, reader, sources, uniform_loads)
from ....kernels.elementwise import run_elementwise  # noqa: F401  (the fused elementwise kernels' runner)
from ....kernels.layout import broadcast_layout, broadcast_strides, merge_dims, merged_operands, offset
from ....kernels.reduce import (FEW_OUTPUTS, MAX_SPLITS, MAX_UNITS, PLANE_WIDTH, SPLIT_CHUNK, VEC, KERNEL_OP,
                                    SHORT_ROW, accumulator, block_reduce, column_launches, combine, identity,
                                    plane_combine, reduce as library_reduce)
from ....cube.runtime.cpu import cpu_runtime
from ....dtype import DType, i32
from ...fusion.fusers import Reduction


def reduce_kernel(red: Reduction, acc: DType, rank: int, modes: tuple, units: int, line: bool,
                  lanes: int | None = None) -> ir.Kernel:
    """The IR of a fused reduction over rows: `red.program`'s value folded over `n` positions per output.

    `lanes` units reduce one output: the whole cube (None, the C target: a vector of units, then a
    tree in shared memory) or a plane (GPU targets: `units / lanes` outputs per cube, plane ops).
    With `line`, the reduced positions of an output are a run of the domain's (merged) last dim, so
    strided inputs are read at a per-cube base plus a step; otherwise through the full layout.
    """
    op = KERNEL_OP.get(red.op, red.op)
    lanes = lanes or units
    b = ir.Builder("fused_reduce")
    arrays = input_params(b, red.program)
    out = b.array_param("out", acc)
    layout = ArrayRef(b.array_param("layout", i32))
    n = b.scalar_param("n", i32)
    split, splits = b.builtin("cube_pos_y"), b.builtin("cube_count_y")
    one = b.const(1, i32)
    chunk = b.binary("div", b.binary("sub", b.binary("add", n, splits), one), splits)
    start = b.binary("mul", split, chunk)
    stop = b.binary("min", n, b.binary("mul", b.binary("add", split, one), chunk))
    scalars = uniform_loads(b, arrays, modes)
    if lanes == units:
        _row_fold(b, red, acc, op, b.builtin("cube_pos_x"), b.builtin("unit_pos"), lanes, units, arrays, out, layout,
                  rank, modes, line, n, start, stop, split, splits, scalars)
        return b.kernel
    # a plane per output: the outputs past the end (in the last cube) skip everything
    plane = b.binary("div", b.builtin("unit_pos"), b.const(lanes, i32))
    pos = b.binary("add", b.binary("mul", b.builtin("cube_pos_x"), b.const(units // lanes, i32)), plane)
    unit = b.binary("rem", b.builtin("unit_pos"), b.const(lanes, i32))
    inside = b.branch(b.binary("lt", pos, b.binary("div", b.length(out), splits)))
    with b.inside(inside.then):
        _row_fold(b, red, acc, op, pos, unit, lanes, units, arrays, out, layout, rank, modes, line, n, start, stop,
                  split, splits, scalars)
    return b.kernel


def _row_fold(b, red, acc, op, pos, unit, lanes, units, arrays, out, layout, rank, modes, line, n, start, stop,
              split, splits, scalars) -> None:
    """The body of `reduce_kernel` for output `pos`, as its lane `unit` of `lanes`."""
    program = red.program
    first = b.binary("mul", pos, n)
    bases, steps = line_reads(b, layout, rank, modes, first) if line else ({}, {})
    total = b.local(ir.Type(acc), "acc")
    b.write(total, b.const(identity(op, acc), acc))
    step = b.const(lanes, i32)

    def fold(r) -> None:
        index_of = reader(b, layout, rank, modes, b.binary("add", first, r), (r, bases, steps) if line else None)
        v = b.cast(program_values(b, program, arrays, index_of, scalars)[red.value], acc)
        b.write(total, combine.__cube_inline__(b, [op, b.read(total), v], {}))

    # Whole rounds of `lanes` positions run unguarded (vectorizable, as in the elementwise kernel);
    # the last, partial round checks each position.
    whole = b.binary("add", start, b.binary("mul", b.binary("div", b.binary("sub", stop, start), step), step))
    with b.loop(start, whole, step) as k:
        fold(b.binary("add", k, unit))
    rest = b.branch(b.binary("lt", whole, stop))
    with b.inside(rest.then):
        r = b.binary("add", whole, unit)
        inside = b.branch(b.binary("lt", r, stop))
        with b.inside(inside.then):
            fold(r)
    if lanes == units:
        result = block_reduce.__cube_inline__(b, [op, b.read(total), units], {})
    else:
        result = plane_combine.__cube_inline__(b, [op, b.read(total), lanes, acc], {})
    first_unit = b.branch(b.binary("eq", unit, b.const(0, i32)))
    with b.inside(first_unit.then):
        b.store(out, b.binary("add", b.binary("mul", pos, splits), split), result)


def columns_kernel(red: Reduction, acc: DType, krank: int, rrank: int, modes: tuple, unit: tuple,
                   guarded: bool) -> ir.Kernel:
    """The IR of a fused reduction over a strided axis: one unit per output, looping over the reduced
    positions (the library's `reduce.columns_kernel` shape). A cube covers CUBE_DIM consecutive outputs
    of one line of the last kept dim; input j is read at its per-cube line base + col * its kept step +
    its offset of the reduced position (computed once per cube and position on the C target). `kept`
    and `red` layouts are [sizes, strides of input 0, strides of input 1, ...] of the kept and reduced
    dims; `unit[j]` says input j's kept step is 1 (known contiguous across units: one vector load on
    the C target). Without `guarded` every unit has an output (the C target's whole cubes: no per-unit branch
    around the loop, which then stays outside the vectorized unit loop)."""
    program = red.program
    op = KERNEL_OP.get(red.op, red.op)
    b = ir.Builder("fused_columns")
    arrays = input_params(b, program)
    out = b.array_param("out", acc)
    kept, rlay = ArrayRef(b.array_param("kept", i32)), ArrayRef(b.array_param("red", i32))
    n, width, col0, blocks = (b.scalar_param(name, i32) for name in ("n", "width", "col0", "blocks"))
    split, splits = b.builtin("cube_pos_y"), b.builtin("cube_count_y")
    one = b.const(1, i32)
    chunk = b.binary("div", b.binary("sub", b.binary("add", n, splits), one), splits)
    start = b.binary("min", n, b.binary("mul", split, chunk))
    stop = b.binary("min", n, b.binary("add", start, chunk))
    scalars = uniform_loads(b, arrays, modes)
    cube_x = b.builtin("cube_pos_x")
    line = b.binary("div", cube_x, blocks)
    col = b.binary("add", col0, b.binary("add", b.binary("mul", b.binary("rem", cube_x, blocks), b.builtin("cube_dim")),
                                         b.builtin("unit_pos")))
    first = b.binary("mul", line, width)
    at = {}
    for j, mode in enumerate(modes):
        if mode != SCALAR:
            kstep = b.const(1, i32) if unit[j] else b.load(kept.array, b.const(krank * (j + 1) + krank - 1, i32))
            at[j] = b.binary("add", offset.__cube_inline__(b, [first, kept, krank, j], {}), b.binary("mul", col, kstep))
    rsteps = {j: b.load(rlay.array, b.const(rrank * (j + 1), i32)) for j in at} if rrank == 1 else {}

    def body() -> None:
        total = b.local(ir.Type(acc), "acc")
        b.write(total, b.const(identity(op, acc), acc))
        with b.loop(start, stop, one) as r:
            def index_of(j: int):
                roff = b.binary("mul", r, rsteps[j]) if rrank == 1 else offset.__cube_inline__(b, [r, rlay, rrank, j], {})
                return b.binary("add", at[j], roff)
            v = b.cast(program_values(b, program, arrays, index_of, scalars)[red.value], acc)
            b.write(total, combine.__cube_inline__(b, [op, b.read(total), v], {}))
        b.store(out, b.binary("add", b.binary("mul", b.binary("add", first, col), splits), split), b.read(total))

    if guarded:
        inside = b.branch(b.binary("lt", col, width))
        with b.inside(inside.then):
            body()
    else:
        body()
    return b.kernel




def source_of(program: Program, reduction: Reduction | None = None) -> list[str]:
    """The sources (C, WGSL, CUDA C) compiled so far for `program` (or for `reduction`), one per layout
    variant and runtime."""
    return sources("red", reduction) if reduction is not None else sources("ew", program)


def _reduced_layouts(shape: tuple, kept: tuple, dims: tuple, views: list):
    """For the columns shape: (kept sizes, reduced sizes, kept layout, reduced layout) of `views` (the
    inputs broadcast to `shape`), each group's dims merged where every input allows; None when the
    reduced positions are contiguous in the largest input and at least SHORT_ROW long (then rows are
    the better shape: a unit per output of a short row beats a cube or plane per row)."""
    strides = [broadcast_strides(shape, v) for v in views]
    groups = []
    for dims_ in (kept, dims):
        sizes, parts = merge_dims([shape[d] for d in dims_], [[s[d] for d in dims_] for s in strides])
        groups.append((sizes or [1], [p or [0] for p in parts]))
    (ksizes, kstrides), (rsizes, rstrides) = groups
    big = max(range(len(views)), key=lambda j: views[j].size if any(strides[j]) else -1)
    if not any(strides[big]) or rstrides[big][-1] == 1 and math.prod(rsizes) >= SHORT_ROW:
        return None
    layout = lambda sizes, parts: np.asarray(sizes + [x for p in parts for x in p], np.int32)
    return ksizes, rsizes, layout(ksizes, kstrides), layout(rsizes, rstrides)


def _run_columns(red: Reduction, acc: DType, shape: tuple, kept: tuple, arrays: list, out, n: int, splits: int,
                 found: tuple, runtime) -> None:
    """The columns shape (`columns_kernel`) of `run_reduction`; `found` from `_reduced_layouts`."""
    ksizes, rsizes, klayout, rlayout = found
    views = [a if a.size == 1 else np.broadcast_to(a, shape) for a in arrays]
    modes = tuple(SCALAR if v.size == 1 or not any(v.strides) else STRIDED for v in views)
    width = ksizes[-1]
    krank = len(ksizes)
    unit = tuple(bool(klayout[krank * (j + 1) + krank - 1] == 1) for j in range(len(views)))
    lines = math.prod(ksizes) // width
    for blocks, col0, dim, guarded in column_launches(width, runtime.target):
        compiled = compiled_kernel(("cols", red, acc, krank, len(rsizes), modes, unit, guarded, dim),
                                    lambda g=guarded: columns_kernel(red, acc, krank, len(rsizes), modes, unit, g),
                                    cube.CubeDim(dim), runtime)
        runtime.run(compiled, cube.CubeCount(lines * blocks, splits),
                    (*views, out.reshape(-1), klayout, rlayout, n, width, col0, blocks))


def run_reduction(red: Reduction, shape: tuple, arrays: list, runtime=None):
    """The fused reduction of `red.program`'s value over `red.dims` of the domain `shape`, on `runtime`
    (None: the CPU runtime), the output allocated beside `arrays`."""
    runtime = runtime or cpu_runtime()
    kept = tuple(d for d in range(len(shape)) if d not in red.dims)
    out_shape = tuple(shape[d] for d in kept)
    n = math.prod(shape[d] for d in red.dims)
    size = math.prod(out_shape)
    acc = accumulator(red.op, red.program.dtype(red.value))
    splits = max(1, min(MAX_SPLITS, n // SPLIT_CHUNK)) if size < FEW_OUTPUTS else 1
    direct = splits == 1 and acc is red.dtype  # the kernel writes the result itself, else partials
    if size == 0 or direct:
        out = empty(out_shape, red.dtype.np, *arrays)
        if size == 0:
            return out
    else:
        out = empty(size * splits, acc.np, *arrays)
    columns = _reduced_layouts(shape, kept, red.dims, arrays) if size and n else None
    if columns is not None:
        _run_columns(red, acc, shape, kept, arrays, out, n, splits, columns, runtime)
        return out if direct else _finish(red, out, size, splits, out_shape)
    perm = kept + red.dims
    permuted = tuple(shape[d] for d in perm)
    views = [np.broadcast_to(a, shape).transpose(perm) for a in arrays]
    target = runtime.target
    lanes = PLANE_WIDTH.get(target)
    # GPU targets: a plane per output, 8 per cube; others: a cube per output, one vector of units
    units = MAX_UNITS if lanes else min(VEC.get(target, 64) // acc.itemsize, 1 << max(0, (n - 1).bit_length()))
    if math.prod(permuted):
        merged, views = merged_operands(permuted, *views)
        modes = read_modes(views, merged)
        rank, layout = max(len(merged), 1), broadcast_layout(merged, *views)
    else:  # empty reduced dims: nothing is read, every output is the identity
        rank, layout, modes = 1, np.zeros(1 + len(views), np.int32), (SCALAR,) * len(views)
        views = [empty(1, a.dtype, *arrays) for a in arrays]
    # An output's n positions run along the merged last dim when they are a whole run of it (it may have
    # merged with kept dims: a (64, 64) mask against (B, H, 64, 64) scores merges to (B * H, 4096))
    line = STRIDED in modes and int(layout[rank - 1]) % n == 0
    if line:  # inputs whose lines are contiguous: read at their line base + position (a vector on the C target)
        modes = tuple(UNIT if m == STRIDED and v.strides[-1] == v.itemsize else m for m, v in zip(modes, views))
    dim = cube.CubeDim(units)
    compiled = compiled_kernel(("red", red, acc, rank, modes, units, line, lanes),
                                lambda: reduce_kernel(red, acc, rank, modes, units, line, lanes), dim, runtime)
    per = units // lanes if lanes else 1
    runtime.run(compiled, cube.CubeCount(-(-size // per), splits), (*views, out.reshape(-1), layout, n))
    return out if direct else _finish(red, out, size, splits, out_shape)


def _finish(red: Reduction, partials, size: int, splits: int, out_shape: tuple):
    """The result from `splits` partial results per output (or from the accumulator dtype)."""
    stage = library_reduce(red.op, partials.reshape(size, splits), dims=1).reshape(out_shape)
    return stage if stage.dtype == red.dtype.np else stage.astype(red.dtype.np)
