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
from ...cube.kernels.common import element_strides, grid, offset
from ...cube.kernels.reduce import (FEW_OUTPUTS, MAX_SPLITS, MAX_UNITS, SPLIT_CHUNK, _KERNEL_OP, accumulator,
                                    block_reduce, combine, identity, reduce as library_reduce)
from ...cube.runtime.cpu import cpu_runtime
from ...dtype import DType, i32
from ..cube.layout import merged_operands
from .ops import emit

UNITS = 256


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


def _values(b: ir.Builder, program: Program, arrays: list, position, layout, rank: int, modes: tuple,
            scalars: dict) -> list:
    """Load every input at `position` and compute every step; the list of values by id."""
    values = []
    for j, arr in enumerate(arrays):
        if modes[j] == SCALAR:
            values.append(scalars[j])
            continue
        index = position if modes[j] == DENSE else offset.__cube_inline__(b, [position, layout, rank, j], {})
        values.append(b.load(arr, index))
    for name, params, args, dtype in program.steps:
        values.append(emit(b, name, params, [values[a] for a in args], dtype))
    return values


def _inputs(b: ir.Builder, program: Program) -> list:
    return [b.array_param(f"in{j}", d) for j, d in enumerate(program.inputs)]


def elementwise_kernel(program: Program, rank: int, modes: tuple) -> ir.Kernel:
    """The IR of `program` over `rank`-dim layouts, each input read as `modes[j]` says (DENSE, SCALAR, STRIDED)."""
    b = ir.Builder("fused")
    arrays = _inputs(b, program)
    outs = [b.array_param(f"out{k}", program.dtype(v)) for k, v in enumerate(program.outputs)]
    layout = ArrayRef(b.array_param("layout", i32))
    n = b.scalar_param("n", i32)
    scalars = _scalars(b, arrays, modes)
    i = b.builtin("absolute_pos")

    def body() -> None:
        values = _values(b, program, arrays, i, layout, rank, modes, scalars)
        for out, v in zip(outs, program.outputs):
            b.store(out, i, values[v])

    # A cube that is wholly inside runs the body unguarded: the condition is the same for all its
    # units, so the C target lifts it out of the unit loop, which gcc then vectorizes (it gives up on
    # long bodies under a per-unit guard). Only the last cube checks each position.
    end = b.binary("mul", b.binary("add", b.builtin("cube_pos"), b.const(1, i32)), b.builtin("cube_dim"))
    whole = b.branch(b.binary("le", end, n))
    with b.inside(whole.then):
        body()
    with b.inside(whole.orelse):
        tail = b.branch(b.binary("lt", i, n))
        with b.inside(tail.then):
            body()
    return b.kernel


def reduce_kernel(red: Reduction, acc: DType, rank: int, modes: tuple, units: int) -> ir.Kernel:
    """The IR of a fused reduction: `red.program`'s value folded over `n` positions per output."""
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
    total = b.local(ir.Type(acc), "acc")
    b.write(total, b.const(identity(op, acc), acc))
    with b.loop(start, stop, b.const(units, i32)) as k:
        r = b.binary("add", k, unit)
        inside = b.branch(b.binary("lt", r, stop))
        with b.inside(inside.then):
            position = b.binary("add", b.binary("mul", pos, n), r)
            v = b.cast(_values(b, program, arrays, position, layout, rank, modes, scalars)[red.value], acc)
            b.write(total, combine.__cube_inline__(b, [op, b.read(total), v], {}))
    result = block_reduce.__cube_inline__(b, [op, b.read(total), units], {})
    first = b.branch(b.binary("eq", unit, b.const(0, i32)))
    with b.inside(first.then):
        b.store(out, b.binary("add", b.binary("mul", pos, splits), split), result)
    return b.kernel


_compiled: dict = {}


def _compiled_kernel(key: tuple, build, dim: cube.CubeDim):
    """Compile once per (program, layout rank, modes inputs, ...): later launches are a dict lookup."""
    compiled = _compiled.get(key)
    if compiled is None:
        compiled = _compiled[key] = cpu_runtime().compile_ir(build(), dim)
    return compiled


def _layout(shape: tuple, views: list) -> tuple:
    rank = max(len(shape), 1)
    parts = list(shape) or [1]
    for v in views:
        parts += list(element_strides(v)) or [0]
    return rank, np.asarray(parts, np.int32)


def run_elementwise(program: Program, shape: tuple, arrays: list) -> list[np.ndarray]:
    """Run `program` over the broadcast `shape` on input `arrays`; the output arrays."""
    outs = [np.empty(shape, program.dtype(v).np) for v in program.outputs]
    size = math.prod(shape)
    if size == 0:
        return outs
    merged, views = merged_operands(shape, *arrays)
    modes = _modes(views, merged)
    rank, layout = _layout(merged, views)
    dim = cube.CubeDim(UNITS)
    compiled = _compiled_kernel(("ew", program, rank, modes),
                                lambda: elementwise_kernel(program, rank, modes), dim)
    count, _ = grid(size, UNITS)
    cpu_runtime().run(compiled, count, (*views, *(o.reshape(-1) for o in outs), layout, size))
    return outs


def source_of(program: Program, reduction: Reduction | None = None) -> list[str]:
    """The C sources compiled so far for `program` (or for `reduction`), one per layout variant."""
    kind, target = ("red", reduction) if reduction is not None else ("ew", program)
    return [c.source for key, c in _compiled.items() if key[0] == kind and key[1] == target]


def run_reduction(red: Reduction, shape: tuple, arrays: list) -> np.ndarray:
    """The fused reduction of `red.program`'s value over `red.dims` of the domain `shape`."""
    kept = tuple(d for d in range(len(shape)) if d not in red.dims)
    out_shape = tuple(shape[d] for d in kept)
    n = math.prod(shape[d] for d in red.dims)
    out = np.empty(out_shape, red.dtype.np)
    if out.size == 0:
        return out
    acc = accumulator(red.op, red.program.dtype(red.value))
    perm = kept + red.dims
    permuted = tuple(shape[d] for d in perm)
    views = [np.broadcast_to(a, shape).transpose(perm) for a in arrays]
    units = min(MAX_UNITS, 1 << max(0, (n - 1).bit_length()))
    splits = max(1, min(MAX_SPLITS, n // SPLIT_CHUNK)) if out.size < FEW_OUTPUTS else 1
    partial = out if splits == 1 and acc is red.dtype else np.empty(out.size * splits, acc.np)
    if math.prod(permuted):
        merged, views = merged_operands(permuted, *views)
        modes = _modes(views, merged)
        rank, layout = _layout(merged, views)
    else:  # empty reduced dims: nothing is read, every output is the identity
        rank, layout, modes = 1, np.zeros(1 + len(views), np.int32), (SCALAR,) * len(views)
        views = [np.empty(1, a.dtype) for a in arrays]
    dim = cube.CubeDim(units)
    compiled = _compiled_kernel(("red", red, acc, rank, modes, units),
                                lambda: reduce_kernel(red, acc, rank, modes, units), dim)
    cpu_runtime().run(compiled, cube.CubeCount(out.size, splits), (*views, partial.reshape(-1), layout, n))
    if partial is out:
        return out
    stage = library_reduce(red.op, partial.reshape(out.size, splits), dims=1)
    out[...] = stage.reshape(out_shape).astype(red.dtype.np)
    return out
