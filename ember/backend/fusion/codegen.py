"""Fused kernels: a normalized elementwise program becomes one cube kernel, built as IR directly.

Each step inlines the kernel library's own cube functions (`unary_op`, `binary_op`, `offset`,
`combine`, `block_reduce`) into an `ir.Builder`, so op semantics are the library's.

A `Program` is the normalized elementwise part: value ids `0 .. len(inputs)-1` are the input arrays,
each later id is one step `(primitive name, static params, argument ids, dtype)`. `outputs` are the
ids written to memory, each to a new contiguous array.

- elementwise kernel (`run_elementwise`): one output element per position; inputs are read through
  broadcast layouts (`layout.merged_operands`); a dense input by its flat position and a one-element
  input at index 0. On GPU targets each unit computes `PER_UNIT` positions.
- reduce kernels (fuse-on-read, `run_reduction`), in the kernel library's shapes
  (`cube/kernels/reduce.py`), chosen by layout and target: rows (`reduce_kernel`) when the reduced
  positions are contiguous in the largest input and at least `SHORT_ROW` long, else columns
  (`columns_kernel`, one unit per output); both split over several cubes when there are few outputs.

Why IR rather than a `@cube.kernel`, and the kernel shapes per target: docs/fusion.md, "Generated
kernels".

Example:
    >>> p = Program((f32,), (("exp", (), (0,), f32), ("neg", (), (1,), f32)), (2,))
    >>> run_elementwise(p, (3,), [np.zeros(3, np.float32)])[0]
    array([-1., -1., -1.], dtype=float32)
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import numpy as np

from ... import cube
from ...cube import ir
from ...cube.frontend import ArrayRef
from ...cube.kernels.common import broadcast_strides, element_strides, empty, grid, merge_dims, offset
from ...cube.kernels.reduce import (FEW_OUTPUTS, MAX_SPLITS, MAX_UNITS, PLANE_WIDTH, SPLIT_CHUNK, VEC, _KERNEL_OP,
                                    SHORT_ROW, accumulator, block_reduce, column_launches, combine, identity,
                                    plane_combine, reduce as library_reduce)
from ...cube.runtime.cpu import cpu_runtime
from ...dtype import DType, i32
from ..cube.layout import merged_operands
from .ops import emit

UNITS = 256
MIN_ROW = 64  # a domain whose last dim is at least this long runs line by line (see elementwise_kernel)
# Positions per unit of an elementwise kernel, by target: on a GPU one position per unit of a large
# kernel launches so many cubes that it falls well short of the memory bandwidth (docs/fusion.md).
PER_UNIT = {"cuda": 4}
# Targets whose line-by-line kernel runs a whole line per cube of MIN_ROW units (see elementwise_kernel),
# when there are at least WALK_MIN_LINES lines (cubes enough for any core count; fewer, longer lines
# keep cubes of UNITS along the line, whose masked tail is then a small part of each line).
WALK_TARGETS, WALK_MIN_LINES = ("cpu",), 256
MAX_GRID = 65535  # cubes along a grid's y or z dimension (CUDA, WGSL)


@dataclass(frozen=True)
class Program:
    """A normalized elementwise program (see the module docstring)."""

    inputs: tuple
    steps: tuple
    outputs: tuple

    def dtype(self, value: int) -> DType:
        return self.inputs[value] if value < len(self.inputs) else self.steps[value - len(self.inputs)][3]

    def text(self) -> str:
        """One line per step, e.g. `%2 = exp(%0) : f32`."""
        n = len(self.inputs)
        lines = [f"%{j} = input : {d.name}" for j, d in enumerate(self.inputs)]
        for k, (name, params, args, dtype) in enumerate(self.steps):
            extra = f" {params}" if params else ""
            lines.append(f"%{n + k} = {name}({', '.join(f'%{a}' for a in args)}){extra} : {dtype.name}")
        lines.append(f"write {', '.join(f'%{o}' for o in self.outputs)}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Reduction:
    """A reduction reading value `value` of `program` (fuse-on-read)."""

    program: Program
    value: int
    op: str            # sum, prod, amax, amin
    dims: tuple        # reduced dims of the program's domain
    dtype: DType       # output dtype


# How an input is read: by flat position, its one element, its layout, or (line-by-line kernels
# only) one element per line, the same along the line (a (C, 1, 1) bias against (N, C, H*W)).
DENSE, SCALAR, STRIDED, LINE = 0, 1, 2, 3


def _modes(views: list, shape: tuple) -> tuple:
    return tuple(DENSE if v.flags.c_contiguous and v.shape == shape else SCALAR if v.size == 1 or not any(v.strides)
                 else STRIDED for v in views)


def _line_modes(modes: tuple, views: list) -> tuple:
    """`modes` for a line-by-line kernel: a strided input that does not move along the last dim is LINE."""
    return tuple(LINE if m == STRIDED and v.strides[-1] == 0 else m for m, v in zip(modes, views))


def _scalars(b: ir.Builder, arrays: list, modes: tuple, bases: dict | None = None) -> dict:
    """The inputs that are the same for every unit of a cube, loaded once before any branch (gcc will
    not vectorize a loop whose branch holds a load it cannot prove safe; a load per unit of a value
    that does not change would be a gather): the one-element inputs, and the LINE inputs at their
    line's offset (`bases`, from `_line`)."""
    return {j: b.load(arr, b.const(0, i32) if modes[j] == SCALAR else bases[j])
            for j, arr in enumerate(arrays) if modes[j] in (SCALAR, LINE)}


def _values(b: ir.Builder, program: Program, arrays: list, index_of, scalars: dict) -> list:
    """Load every input (array `j` at `index_of(j)`) and compute every step; the values by id."""
    values = [scalars[j] if j in scalars else b.load(arr, index_of(j)) for j, arr in enumerate(arrays)]
    for name, params, args, dtype in program.steps:
        values.append(emit(b, name, params, [values[a] for a in args], dtype))
    return values


def _inputs(b: ir.Builder, program: Program) -> list:
    return [b.array_param(f"in{j}", d) for j, d in enumerate(program.inputs)]


def _line(b: ir.Builder, layout, rank: int, modes: tuple, start) -> tuple:
    """For a line of the domain starting at flat position `start` and running along its last dim:
    each strided or LINE input's offset at `start` and each strided one's step along the line (values
    the same for every unit of a cube, so the C target computes them once per cube, divisions included)."""
    bases, steps = {}, {}
    for j, mode in enumerate(modes):
        if mode in (STRIDED, LINE):
            bases[j] = offset.__cube_inline__(b, [start, layout, rank, j], {})
        if mode == STRIDED:
            steps[j] = b.load(layout.array, b.const(rank * (j + 1) + rank - 1, i32))
    return bases, steps


def _reader(b: ir.Builder, layout, rank: int, modes: tuple, position, line: tuple | None):
    """`index_of(j)`: where input `j` is read for flat `position`: the position itself when it is dense;
    on a line (`line = (along, bases, steps)` from `_line`) its base plus `along` steps; else through
    its layout."""
    def index_of(j: int):
        if modes[j] == DENSE:
            return position
        if line is not None:
            along, bases, steps = line
            return b.binary("add", bases[j], b.binary("mul", along, steps[j]))
        return offset.__cube_inline__(b, [position, layout, rank, j], {})
    return index_of


def _guarded(b: ir.Builder, whole, positions: list, limit, body) -> None:
    """`body(p)` for each of `positions`: unguarded where `whole` (a condition the same for all units)
    holds, else each under `p < limit`: gcc vectorizes the unguarded copy (it gives up on long bodies
    under a per-unit guard), and only the last cube of a line pays for the checks."""
    branch = b.branch(whole)
    with b.inside(branch.then):
        for p in positions:
            body(p)
    with b.inside(branch.orelse):
        for p in positions:
            tail = b.branch(b.binary("lt", p, limit))
            with b.inside(tail.then):
                body(p)


def elementwise_kernel(program: Program, rank: int, modes: tuple, rows: bool, per: int = 1,
                       walk: bool = False, tall: bool = False) -> ir.Kernel:
    """The IR of `program` over `rank`-dim layouts, each input read as `modes[j]` says (DENSE, SCALAR,
    STRIDED, LINE). With `rows`, cube (x, y) covers units x of line y of the domain's last dim, so strided
    inputs cost one multiply-add per element and LINE inputs one load per cube; otherwise cubes cover
    flat positions. Each unit computes `per` positions, CUBE_DIM apart (GPU targets: 4, so that a cube's
    index arithmetic is shared by more elements and the grid has 4x fewer cubes; the C target: 1).

    With `walk` (and `rows`; the C target), cube y runs all of line y, CUBE_DIM positions at a time, the
    last step shifted back inside the line (the host keeps lines at least CUBE_DIM long): no unit is
    ever masked (gcc does not vectorize a masked tail, and a line shorter than a cube of 256 units was
    all tail: a (64, 32, 196) bias + relu ran 6x slower than memory allows), a few positions are
    computed twice (the outputs are new arrays, so no input changes under the second pass).

    With `tall` (and `rows`), line y + z * CUBE_COUNT_Y is cube (x, y, z)'s, and cubes past the last line
    do nothing: more lines than a grid dimension holds (CUDA and WGSL: 65535; the (batch * heads, L, S)
    matrices of attention have 98304 lines of 1024, which ran on flat positions at twice the bandwidth's
    time, decoding every element's coordinates)."""
    b = ir.Builder("fused")
    arrays = _inputs(b, program)
    outs = [b.array_param(f"out{k}", program.dtype(v)) for k, v in enumerate(program.outputs)]
    layout = ArrayRef(b.array_param("layout", i32))
    n = b.scalar_param("n", i32)
    with contextlib.ExitStack() as guard:
        if rows:
            width = b.load(layout.array, b.const(rank - 1, i32))
            line = b.builtin("cube_pos" if walk else "cube_pos_y")
            if tall:
                line = b.binary("add", line, b.binary("mul", b.builtin("cube_pos_z"), b.builtin("cube_count_y")))
            start = b.binary("mul", line, width)
            if tall:  # the cubes past the last line: all that follows is inside this branch
                guard.enter_context(b.inside(b.branch(b.binary("lt", start, n)).then))
            bases, steps = _line(b, layout, rank, modes, start)
            scalars = _scalars(b, arrays, modes, bases)
        else:
            scalars = _scalars(b, arrays, modes)

        def body(position) -> None:
            i = b.binary("add", start, position) if rows else position
            index_of = _reader(b, layout, rank, modes, i, (position, bases, steps) if rows else None)
            values = _values(b, program, arrays, index_of, scalars)
            for out, v in zip(outs, program.outputs):
                b.store(out, i, values[v])

        if walk:
            units = b.builtin("cube_dim")
            with b.loop(b.const(0, i32), width, units) as step:
                body(b.binary("add", b.binary("min", step, b.binary("sub", width, units)), b.builtin("unit_pos")))
            return b.kernel
        one = b.const(1, i32)
        span = b.binary("mul", b.builtin("cube_dim"), b.const(per, i32))  # positions a cube covers
        cube_pos = b.builtin("cube_pos_x" if rows else "cube_pos")
        first = b.binary("add", b.binary("mul", cube_pos, span), b.builtin("unit_pos"))
        end = b.binary("mul", b.binary("add", cube_pos, one), span)
        positions = [first] + [b.binary("add", first, b.binary("mul", b.builtin("cube_dim"), b.const(k, i32)))
                               for k in range(1, per)]
        _guarded(b, b.binary("le", end, width if rows else n), positions, width if rows else n, body)
    return b.kernel


def reduce_kernel(red: Reduction, acc: DType, rank: int, modes: tuple, units: int, line: bool,
                  lanes: int | None = None) -> ir.Kernel:
    """The IR of a fused reduction over rows: `red.program`'s value folded over `n` positions per output.

    `lanes` units reduce one output: the whole cube (None, the C target: a vector of units, then a
    tree in shared memory) or a plane (GPU targets: `units / lanes` outputs per cube, plane ops).
    With `line`, the reduced positions of an output are the domain's (merged) last dim, so strided
    inputs are read at a per-cube base plus a step; otherwise through the full layout.
    """
    op = _KERNEL_OP.get(red.op, red.op)
    lanes = lanes or units
    b = ir.Builder("fused_reduce")
    arrays = _inputs(b, red.program)
    out = b.array_param("out", acc)
    layout = ArrayRef(b.array_param("layout", i32))
    n = b.scalar_param("n", i32)
    split, splits = b.builtin("cube_pos_y"), b.builtin("cube_count_y")
    one = b.const(1, i32)
    chunk = b.binary("div", b.binary("sub", b.binary("add", n, splits), one), splits)
    start = b.binary("mul", split, chunk)
    stop = b.binary("min", n, b.binary("mul", b.binary("add", split, one), chunk))
    scalars = _scalars(b, arrays, modes)
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
    bases, steps = _line(b, layout, rank, modes, first) if line else ({}, {})
    total = b.local(ir.Type(acc), "acc")
    b.write(total, b.const(identity(op, acc), acc))
    step = b.const(lanes, i32)

    def fold(r) -> None:
        index_of = _reader(b, layout, rank, modes, b.binary("add", first, r), (r, bases, steps) if line else None)
        v = b.cast(_values(b, program, arrays, index_of, scalars)[red.value], acc)
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
    op = _KERNEL_OP.get(red.op, red.op)
    b = ir.Builder("fused_columns")
    arrays = _inputs(b, program)
    out = b.array_param("out", acc)
    kept, rlay = ArrayRef(b.array_param("kept", i32)), ArrayRef(b.array_param("red", i32))
    n, width, col0, blocks = (b.scalar_param(name, i32) for name in ("n", "width", "col0", "blocks"))
    split, splits = b.builtin("cube_pos_y"), b.builtin("cube_count_y")
    one = b.const(1, i32)
    chunk = b.binary("div", b.binary("sub", b.binary("add", n, splits), one), splits)
    start = b.binary("min", n, b.binary("mul", split, chunk))
    stop = b.binary("min", n, b.binary("add", start, chunk))
    scalars = _scalars(b, arrays, modes)
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
            v = b.cast(_values(b, program, arrays, index_of, scalars)[red.value], acc)
            b.write(total, combine.__cube_inline__(b, [op, b.read(total), v], {}))
        b.store(out, b.binary("add", b.binary("mul", b.binary("add", first, col), splits), split), b.read(total))

    if guarded:
        inside = b.branch(b.binary("lt", col, width))
        with b.inside(inside.then):
            body()
    else:
        body()
    return b.kernel


_compiled: dict = {}


def _compiled_kernel(key: tuple, build, dim: cube.CubeDim, runtime):
    """Compile once per (program, layout rank, input modes, ..., runtime): later launches are a dict
    lookup. A kernel the runtime's target cannot express raises there (the fusion backend then runs
    the block op by op)."""
    key += (runtime,)
    compiled = _compiled.get(key)
    if compiled is None:
        compiled = _compiled[key] = runtime.compile_ir(build(), dim)
    return compiled


def _layout(shape: tuple, views: list) -> tuple:
    rank = max(len(shape), 1)
    parts = list(shape) or [1]
    for v in views:
        parts += list(element_strides(v)) or [0]
    return rank, np.asarray(parts, np.int32)


def run_elementwise(program: Program, shape: tuple, arrays: list, runtime=None) -> list:
    """Run `program` over the broadcast `shape` on input `arrays`; the output arrays.

    `runtime` is the cube runtime the kernel compiles for and runs on (`compile_ir` and `run`); None
    is the CPU runtime on NumPy arrays. The outputs are allocated beside the inputs (`common.empty`):
    on a device runtime they are its arrays.
    """
    runtime = runtime or cpu_runtime()
    outs = [empty(shape, program.dtype(v).np, *arrays) for v in program.outputs]
    size = math.prod(shape)
    if size == 0:
        return outs
    merged, views = merged_operands(shape, *arrays)
    modes = _modes(views, merged)
    rank, layout = _layout(merged, views)
    target = runtime.target
    lines = size // merged[-1]
    walk = target in WALK_TARGETS and lines >= WALK_MIN_LINES
    rows = rank > 1 and STRIDED in modes and merged[-1] >= MIN_ROW
    walk = walk and rows
    # line by line takes a cube row per line: more lines than a grid dimension holds (CUDA, WGSL: 65535)
    # fold into a third dimension (`tall`)
    tall = rows and not walk and lines > MAX_GRID
    modes = _line_modes(modes, views) if rows else modes
    per = PER_UNIT.get(target, 1)
    dim = cube.CubeDim(MIN_ROW if walk else UNITS)
    compiled = _compiled_kernel(("ew", program, rank, modes, rows, per, walk, tall),
                                lambda: elementwise_kernel(program, rank, modes, rows, per, walk, tall), dim, runtime)
    if walk:
        count = cube.CubeCount(lines)
    elif rows:
        z = -(-lines // MAX_GRID)
        count = cube.CubeCount(-(-merged[-1] // (UNITS * per)), -(-lines // z), z)
    else:
        count, _ = grid(-(-size // per), UNITS)
    runtime.run(compiled, count, (*views, *(o.reshape(-1) for o in outs), layout, size))
    return outs


def source_of(program: Program, reduction: Reduction | None = None) -> list[str]:
    """The sources (C, WGSL, CUDA C) compiled so far for `program` (or for `reduction`), one per layout
    variant and runtime."""
    kind, target = ("red", reduction) if reduction is not None else ("ew", program)
    return [c.source for key, c in _compiled.items() if key[0] == kind and key[1] == target]


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
        compiled = _compiled_kernel(("cols", red, acc, krank, len(rsizes), modes, unit, guarded, dim),
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
        modes = _modes(views, merged)
        rank, layout = _layout(merged, views)
    else:  # empty reduced dims: nothing is read, every output is the identity
        rank, layout, modes = 1, np.zeros(1 + len(views), np.int32), (SCALAR,) * len(views)
        views = [empty(1, a.dtype, *arrays) for a in arrays]
    line = STRIDED in modes and int(layout[rank - 1]) == n
    dim = cube.CubeDim(units)
    compiled = _compiled_kernel(("red", red, acc, rank, modes, units, line, lanes),
                                lambda: reduce_kernel(red, acc, rank, modes, units, line, lanes), dim, runtime)
    per = units // lanes if lanes else 1
    runtime.run(compiled, cube.CubeCount(-(-size // per), splits), (*views, out.reshape(-1), layout, n))
    return out if direct else _finish(red, out, size, splits, out_shape)


def _finish(red: Reduction, partials, size: int, splits: int, out_shape: tuple):
    """The result from `splits` partial results per output (or from the accumulator dtype)."""
    stage = library_reduce(red.op, partials.reshape(size, splits), dims=1).reshape(out_shape)
    return stage if stage.dtype == red.dtype.np else stage.astype(red.dtype.np)
