"""Fused kernels: a normalized elementwise program becomes one cube kernel, built as IR directly.

Why `ir.Builder` and not a `@cube.kernel` with the program as a comptime parameter: a fused kernel
has a varying number of input and output arrays of mixed dtypes, which map one-to-one onto array
parameters of the IR, while a Python kernel has a fixed signature (it would need dummy arrays or a
packed buffer of one dtype). The op semantics are not rewritten here: each step inlines the kernel
library's own cube functions (`unary_op`, `binary_op`, `offset`, `combine`, `block_reduce`) into the
builder, exactly as the frontend does when a kernel calls them.

A `Program` is the normalized elementwise part: value ids `0 .. len(inputs)-1` are the input arrays,
each later id is one step `(primitive name, static params, argument ids, dtype)`. `outputs` are the
ids written to memory, each to a new contiguous array.

- elementwise kernel: one unit per output element; inputs are read through broadcast layouts
  (dims merged, rank padded as in the Cube(cpu) backend, `layout.merged_operands`); a dense input
  is read by its flat position and a one-element input at index 0, with no index arithmetic.
- reduce kernel (fuse-on-read): one cube per output element (split over several cubes when there are
  few outputs), its units fold the program's value at every reduced position, then `block_reduce`;
  the domain is permuted to (kept dims, reduced dims), so position `out * n + r` reads element `r` of
  output `out`'s reduction.

Example:
    >>> p = Program((f32,), (("exp", (), (0,), f32), ("neg", (), (1,), f32)), (2,))
    >>> run_elementwise(p, (3,), [np.zeros(3, np.float32)])[0]
    array([-1., -1., -1.], dtype=float32)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ... import cube
from ...cube import ir
from ...cube.frontend import ArrayRef
from ...cube.kernels.common import element_strides, empty, grid, offset
from ...cube.kernels.reduce import (FEW_OUTPUTS, MAX_SPLITS, MAX_UNITS, SPLIT_CHUNK, _KERNEL_OP, accumulator,
                                    block_reduce, combine, identity, reduce as library_reduce)
from ...cube.runtime.cpu import cpu_runtime
from ...dtype import DType, i32
from ..cube.layout import merged_operands
from .ops import emit

UNITS = 256
MIN_ROW = 64  # a domain whose last dim is at least this long runs line by line (see elementwise_kernel)


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


DENSE, SCALAR, STRIDED = 0, 1, 2  # how an input is read: by flat position, its one element, its layout


def _modes(views: list, shape: tuple) -> tuple:
    return tuple(DENSE if v.flags.c_contiguous and v.shape == shape else SCALAR if v.size == 1 or not any(v.strides)
                 else STRIDED for v in views)


def _scalars(b: ir.Builder, arrays: list, modes: tuple) -> dict:
    """The one-element inputs, loaded once before any branch (gcc will not vectorize a loop whose
    branch holds a load it cannot prove safe, and these are the same for every unit)."""
    return {j: b.load(arr, b.const(0, i32)) for j, arr in enumerate(arrays) if modes[j] == SCALAR}


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
    each strided input's offset at `start` and its step along the line (values the same for every
    unit of a cube, so the C target computes them once per cube, divisions included)."""
    bases, steps = {}, {}
    for j, mode in enumerate(modes):
        if mode == STRIDED:
            bases[j] = offset.__cube_inline__(b, [start, layout, rank, j], {})
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


def _guarded(b: ir.Builder, whole, position, limit, body) -> None:
    """`body()` unguarded where `whole` (a condition the same for all units) holds, else under
    `position < limit`: gcc vectorizes the unguarded copy (it gives up on long bodies under a
    per-unit guard), and only the last cube of a line pays for the check."""
    branch = b.branch(whole)
    with b.inside(branch.then):
        body()
    with b.inside(branch.orelse):
        tail = b.branch(b.binary("lt", position, limit))
        with b.inside(tail.then):
            body()


def elementwise_kernel(program: Program, rank: int, modes: tuple, rows: bool) -> ir.Kernel:
    """The IR of `program` over `rank`-dim layouts, each input read as `modes[j]` says (DENSE, SCALAR,
    STRIDED). With `rows`, cube (x, y) covers units x of line y of the domain's last dim, so strided
    inputs cost one multiply-add per element; otherwise cubes cover flat positions."""
    b = ir.Builder("fused")
    arrays = _inputs(b, program)
    outs = [b.array_param(f"out{k}", program.dtype(v)) for k, v in enumerate(program.outputs)]
    layout = ArrayRef(b.array_param("layout", i32))
    n = b.scalar_param("n", i32)
    scalars = _scalars(b, arrays, modes)
    one = b.const(1, i32)
    if rows:
        width = b.load(layout.array, b.const(rank - 1, i32))
        start = b.binary("mul", b.builtin("cube_pos_y"), width)
        col = b.binary("add", b.binary("mul", b.builtin("cube_pos_x"), b.builtin("cube_dim")), b.builtin("unit_pos"))
        i = b.binary("add", start, col)
        bases, steps = _line(b, layout, rank, modes, start)
        end = b.binary("mul", b.binary("add", b.builtin("cube_pos_x"), one), b.builtin("cube_dim"))
        position, limit = col, width
    else:
        i = b.builtin("absolute_pos")
        end = b.binary("mul", b.binary("add", b.builtin("cube_pos"), one), b.builtin("cube_dim"))
        position, limit = i, n

    def body() -> None:
        index_of = _reader(b, layout, rank, modes, i, (col, bases, steps) if rows else None)
        values = _values(b, program, arrays, index_of, scalars)
        for out, v in zip(outs, program.outputs):
            b.store(out, i, values[v])

    _guarded(b, b.binary("le", end, limit), position, limit, body)
    return b.kernel


def reduce_kernel(red: Reduction, acc: DType, rank: int, modes: tuple, units: int, line: bool) -> ir.Kernel:
    """The IR of a fused reduction: `red.program`'s value folded over `n` positions per output.

    With `line`, the reduced positions of an output are the domain's (merged) last dim, so strided
    inputs are read at a per-cube base plus a step; otherwise through the full layout.
    """
    program = red.program
    op = _KERNEL_OP.get(red.op, red.op)
    b = ir.Builder("fused_reduce")
    arrays = _inputs(b, program)
    out = b.array_param("out", acc)
    layout = ArrayRef(b.array_param("layout", i32))
    n = b.scalar_param("n", i32)
    pos, split, splits = b.builtin("cube_pos_x"), b.builtin("cube_pos_y"), b.builtin("cube_count_y")
    one = b.const(1, i32)
    chunk = b.binary("div", b.binary("sub", b.binary("add", n, splits), one), splits)
    start = b.binary("mul", split, chunk)
    stop = b.binary("min", n, b.binary("mul", b.binary("add", split, one), chunk))
    unit = b.builtin("unit_pos")
    scalars = _scalars(b, arrays, modes)
    first = b.binary("mul", pos, n)
    bases, steps = _line(b, layout, rank, modes, first) if line else ({}, {})
    total = b.local(ir.Type(acc), "acc")
    b.write(total, b.const(identity(op, acc), acc))
    step = b.const(units, i32)

    def fold(r) -> None:
        index_of = _reader(b, layout, rank, modes, b.binary("add", first, r), (r, bases, steps) if line else None)
        v = b.cast(_values(b, program, arrays, index_of, scalars)[red.value], acc)
        b.write(total, combine.__cube_inline__(b, [op, b.read(total), v], {}))

    # Whole rounds of `units` positions run unguarded (vectorizable, as in the elementwise kernel);
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
    result = block_reduce.__cube_inline__(b, [op, b.read(total), units], {})
    first_unit = b.branch(b.binary("eq", unit, b.const(0, i32)))
    with b.inside(first_unit.then):
        b.store(out, b.binary("add", b.binary("mul", pos, splits), split), result)
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
    rows = rank > 1 and STRIDED in modes and merged[-1] >= MIN_ROW
    dim = cube.CubeDim(UNITS)
    compiled = _compiled_kernel(("ew", program, rank, modes, rows),
                                lambda: elementwise_kernel(program, rank, modes, rows), dim, runtime)
    if rows:
        count = cube.CubeCount(-(-merged[-1] // UNITS), size // merged[-1])
    else:
        count, _ = grid(size, UNITS)
    runtime.run(compiled, count, (*views, *(o.reshape(-1) for o in outs), layout, size))
    return outs


def source_of(program: Program, reduction: Reduction | None = None) -> list[str]:
    """The sources (C, WGSL, CUDA C) compiled so far for `program` (or for `reduction`), one per layout
    variant and runtime."""
    kind, target = ("red", reduction) if reduction is not None else ("ew", program)
    return [c.source for key, c in _compiled.items() if key[0] == kind and key[1] == target]


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
    perm = kept + red.dims
    permuted = tuple(shape[d] for d in perm)
    views = [np.broadcast_to(a, shape).transpose(perm) for a in arrays]
    units = min(MAX_UNITS, 1 << max(0, (n - 1).bit_length()))
    if math.prod(permuted):
        merged, views = merged_operands(permuted, *views)
        modes = _modes(views, merged)
        rank, layout = _layout(merged, views)
    else:  # empty reduced dims: nothing is read, every output is the identity
        rank, layout, modes = 1, np.zeros(1 + len(views), np.int32), (SCALAR,) * len(views)
        views = [empty(1, a.dtype, *arrays) for a in arrays]
    line = STRIDED in modes and int(layout[rank - 1]) == n
    dim = cube.CubeDim(units)
    compiled = _compiled_kernel(("red", red, acc, rank, modes, units, line),
                                lambda: reduce_kernel(red, acc, rank, modes, units, line), dim, runtime)
    runtime.run(compiled, cube.CubeCount(size, splits), (*views, out.reshape(-1), layout, n))
    if direct:
        return out
    stage = library_reduce(red.op, out.reshape(size, splits), dims=1).reshape(out_shape)
    return stage if stage.dtype == red.dtype.np else stage.astype(red.dtype.np)
