"""The walk every target shares: structured IR to one line per instruction (C, CUDA C, WGSL).

A target subclasses `Walker` and says how to spell what differs: the loop variable's declaration
(`LOOP_VAR`), the barrier (`BARRIER`), a local variable's declaration (`declare`), how an
instruction's result is bound (`define`), loads, stores, atomics, plane ops and the remaining ops
(`compute`, usually through `lane` and the target's `scalar`). Loops and branches are C-like braces
in every target; values are named `v<id>` (`value`), locals `l<n>` (`local_name`). The C target walks
each of its phases with it, naming values by where they live and leaving a unit by `goto`.
`builtin_table` derives every launch builtin from a target's spelling of the per-axis ones.
`data` holds the values that are not positions (`data_values`): the C family guards their division and
makes their signed arithmetic wrap, and keeps C's for positions.

Example:
    >>> class Tiny(Walker):
    ...     LOOP_VAR, BARRIER = "int {}", "barrier();"
    >>> Tiny(kernel, CubeDim(64)).block(kernel.body, 1)
"""

from __future__ import annotations

import re

from .. import ir
from ..ir import For, Instr
from ..lang import CubeDim


class Walker:
    """Renders a kernel's statements into `lines`; see the module docstring for what a target gives."""

    LOOP_VAR = "int32_t {}"  # declaration of a loop's induction variable, formatted with its name
    BARRIER = ""             # the statement of sync_units

    def __init__(self, kernel: ir.Kernel, dim: CubeDim) -> None:
        self.k = kernel
        self.dim = dim
        self.lines: list[str] = []
        self.locals: dict = {}
        self.consts = {s.result: s.attr for s in ir.walk(kernel.body) if isinstance(s, Instr) and s.op == "const"}
        self.data = data_values(kernel)

    def emit(self, line: str, depth: int) -> None:
        self.lines.append("  " * depth + line)

    def value(self, v: ir.Value) -> str:
        return f"v{v.id}"

    def local_name(self, var: ir.Local) -> str:
        return self.locals.setdefault(var, f"l{len(self.locals)}")

    def leave(self) -> str:
        """The statement of `return`: the unit exits; later barriers wait only for the units still running."""
        return "return;"

    def for_header(self, s: For) -> str:
        step = self.consts.get(s.step)
        cmp = ">" if step is not None and step < 0 else "<"
        v = f"v{s.var.id}"
        return (f"for ({self.LOOP_VAR.format(v)} = {self.value(s.start)}; {v} {cmp} {self.value(s.stop)}; "
                f"{v} += {self.value(s.step)}) {{")

    def block(self, stmts: list, depth: int) -> None:
        for s in stmts:
            if isinstance(s, Instr):
                self.instr(s, depth)
            elif isinstance(s, For):
                self.emit(self.for_header(s), depth)
                self.block(s.body, depth + 1)
                self.emit("}", depth)
            else:
                self.emit(f"if ({self.value(s.cond)}) {{", depth)
                self.block(s.then, depth + 1)
                if s.orelse:
                    self.emit("} else {", depth)
                    self.block(s.orelse, depth + 1)
                self.emit("}", depth)

    def instr(self, s: Instr, depth: int) -> None:
        a = [self.value(v) for v in s.args]
        op = s.op
        if op == "shared":
            return  # declared once at the top
        if op == "sync_units":
            self.emit(self.BARRIER, depth)
        elif op == "return":
            self.emit(self.leave(), depth)
        elif op == "local":
            self.declare(s.attr, depth)
        elif op == "write":
            self.emit(f"{self.local_name(s.attr)} = {a[0]};", depth)
        elif op == "store":
            self.store(s, a, depth)
        elif op in ir.ATOMIC:
            self.atomic(s, a, depth)
        else:
            self.define(s, a, depth)

    def expr(self, s: Instr, a: list) -> str:
        """The value of `s` (operands rendered as `a`) as an expression; `compute` renders the ops."""
        op = s.op
        if op == "const":
            return self.literal(s.attr, s.result.type.dtype)
        if op == "builtin":
            return self.builtin(s.attr)
        if op == "len":
            return f"len_{self.array_name(s.attr)}"
        if op == "read":
            return self.local_name(s.attr)
        if op in ir.LOADS:  # lut16's index is already in 0..15
            return self.load(s, a)
        if op in ir.PLANE:
            return self.plane(s, a[0])
        return self.compute(s, a)

    def array_name(self, arr: ir.Array) -> str:
        return arr.name

    def lane(self, s: Instr, a: list, index: str = "") -> str:
        """The scalar op of `s` on one lane: vector operands followed by `index` (`[l]`), scalars as they are.

        With the default `index` and scalar operands it is the scalar op itself (`scalar`, which each
        target gives for its compute types).
        """
        args = [x + index if v.type.lanes > 1 else x for x, v in zip(a, s.args)]
        return self.scalar(s.op, args, [v.type.dtype for v in s.args], s.result.type.dtype, data=s.result in self.data)

    # -- what each target spells its own way ------------------------------------------------------
    def literal(self, value, dtype) -> str:
        raise NotImplementedError

    def builtin(self, name: str) -> str:
        """A launch coordinate or size (`unit_pos_x`, `cube_count`, `plane_dim`, ...)."""
        raise NotImplementedError

    def load(self, s: Instr, a: list) -> str:
        raise NotImplementedError

    def plane(self, s: Instr, x: str) -> str:
        """A plane op (`plane_sum`, ...) over this unit's value `x`."""
        raise NotImplementedError

    def compute(self, s: Instr, a: list) -> str:
        """Every other op: scalar ops, vector lanes (`extract`, `pack`) and ops over vectors."""
        raise NotImplementedError

    def declare(self, var: ir.Local, depth: int) -> None:
        """A local variable, zero-initialized."""
        raise NotImplementedError

    def define(self, s: Instr, a: list, depth: int) -> None:
        """The value of `s` (operands rendered as `a`), bound to `v<id>`."""
        raise NotImplementedError

    def store(self, s: Instr, a: list, depth: int) -> None:
        raise NotImplementedError

    def atomic(self, s: Instr, a: list, depth: int) -> None:
        raise NotImplementedError


def data_values(kernel: ir.Kernel) -> set:
    """The values of `kernel` that are not positions: a position is an index of a load, a store, an
    atomic, a fragment or a copy, a loop bound, or a value one is computed from (builtins, lengths, loop counters, strides read
    from a layout array, ...). The C family's targets keep C's signed arithmetic and division for
    positions, which the compiler needs to vectorize addressing, and give the rest the IR's semantics."""
    stmts = list(ir.walk(kernel.body))
    positions: set = set()
    position_locals: set = set()
    size = -1
    while size != len(positions) + len(position_locals):  # a variable's writes may follow its reads
        size = len(positions) + len(position_locals)
        for s in reversed(stmts):  # uses before definitions
            if isinstance(s, For):
                positions.update((s.start, s.stop, s.step))
                continue
            if not isinstance(s, Instr):
                continue
            if s.op in ("load", "store") or s.op in ir.ATOMIC:
                positions.add(s.args[0])
            elif (s.op in ir.MATRIX or s.op in ir.COPY) and s.op != "matrix_fill":
                positions.update(s.args)  # indices, strides, counts of fragments and copies
            if s.op == "write" and s.attr in position_locals:
                positions.add(s.args[0])
            if s.result in positions:
                if s.op == "read":
                    position_locals.add(s.attr)
                positions.update(s.args)
    return {s.result for s in stmts if isinstance(s, Instr) and s.result is not None} - positions


def identifier(name: str) -> str:
    """`name` with every character an identifier cannot hold replaced by `_` (`my-kernel` -> `my_kernel`)."""
    return re.sub(r"\W", "_", name)


def builtin_table(unit: tuple, cube: tuple, count: tuple, linear: tuple, plane: tuple) -> dict:
    """Every launch builtin from a target's spelling of the per-axis (x, y, z) unit positions, cube
    positions and cube counts, the linear (unit, cube, count) ones and (plane_dim, unit_pos_plane).

    The rest is the same arithmetic on every target: linear forms are x-fastest, the cube shape is the
    constants NU, DX, DY, DZ, and an absolute position is cube * cube_dim + unit.
    """
    u, c, n = linear
    table = {"unit_pos": u, "cube_pos": c, "cube_dim": "NU", "cube_count": n, "absolute_pos": f"({c} * NU + {u})",
             "plane_dim": plane[0], "unit_pos_plane": plane[1]}
    for axis, ua, ca, na in zip("xyz", unit, cube, count):
        d = f"D{axis.upper()}"
        table.update({f"unit_pos_{axis}": ua, f"cube_pos_{axis}": ca, f"cube_dim_{axis}": d,
                      f"cube_count_{axis}": na, f"absolute_pos_{axis}": f"({ca} * {d} + {ua})"})
    return table
