"""Running a cube's units one after another: the body cut into phases at barriers.

A CPU target runs the units of a cube as a loop. A barrier then means: every unit finishes the code
before it before any unit starts the code after it. `Schedule` cuts the kernel body at barriers into
`Phase`s (each run as one loop over the units) and lifts loops, and branches around loops or barriers,
with uniform bounds or conditions (the same for every unit) to "cube level", outside the unit loops,
with phases inside them; this is what lets a barrier sit inside a uniform loop. Uniform instructions can also be hoisted to
cube level (`Schedule.hoist`), to be computed once per cube.

A barrier under divergent control flow (a branch on a per-unit value, a loop with per-unit bounds)
cannot be scheduled this way and raises `PhaseError`. A table look-up (`lut16`) outside divergent control
flow cuts the phases too: it becomes a node ("lut", instr) between them, which the C target renders as one
vector shuffle across the units (a look-up inside a unit loop would be a gather); under divergent control
flow it stays in its phase as a load.

Example:
    >>> sched = Schedule(kernel)
    >>> sched.tree   # [Phase, ("for", For, [Phase, ...]), ("lut", Instr), Phase, ...]
"""

from __future__ import annotations

from .. import ir
from ..ir import For, If, Instr


class PhaseError(ValueError):
    """A kernel whose barriers cannot be turned into phases (see the module docstring)."""



LUT = "lut"
"""The site of a cut look-up's result: a per-unit array filled between two phases."""


class Phase:
    def __init__(self, index: int) -> None:
        self.index = index
        self.stmts: list = []      # run by every unit, inside the unit loop
        self.hoisted: list = []    # uniform instructions computed once per cube before the loop


class Schedule:
    """The cube-level tree: a list of Phase, ("for", For, children), ("if", If, then, orelse) and ("lut", Instr);
    `luts` lists the cut look-ups."""

    def __init__(self, kernel: ir.Kernel) -> None:
        self.kernel = kernel
        self.phases: list = []
        self.site: dict = {}        # Value -> Phase, or "cube" for values every unit shares
        self.written = {s.attr for s in ir.walk(kernel.body)
                        if isinstance(s, Instr) and s.op in ("store",) + ir.ATOMIC}
        # Hoisting a load runs it for the cube even if every unit has returned, and a unit's guard
        # (`if pos >= n: return`) may be what keeps the address in range: no load hoisting then.
        self.hoist_loads = not any(isinstance(s, Instr) and s.op == "return" for s in ir.walk(kernel.body))
        self.shared: list = []
        self.luts: list = []
        for p in kernel.params:
            if isinstance(p, ir.ScalarParam):
                self.site[p.value] = "cube"
        self.tree = self.build(kernel.body)

    def new_phase(self) -> Phase:
        phase = Phase(len(self.phases))
        self.phases.append(phase)
        return phase

    def build(self, block: list) -> list:
        nodes: list = []
        phase = self.new_phase()
        nodes.append(phase)
        for s in block:
            if isinstance(s, Instr) and s.op == "sync_units":
                phase = self.new_phase()
                nodes.append(phase)
            elif isinstance(s, Instr) and s.op == "shared":
                self.shared.append(s.attr)
            elif isinstance(s, Instr) and s.op == "lut16":
                self.luts.append(s)
                self.site[s.result] = LUT
                nodes.append(("lut", s))
                phase = self.new_phase()
                nodes.append(phase)
            elif isinstance(s, For) and self.hoist((s.start, s.stop, s.step)):
                self.site[s.var] = "cube"
                nodes.append(("for", s, self.build(s.body)))
                phase = self.new_phase()
                nodes.append(phase)
            elif isinstance(s, If) and (_has_barrier(s) or _has_loop(s) or _has_lut(s)) and self.hoist((s.cond,)):
                nodes.append(("if", s, self.build(s.then), self.build(s.orelse)))
                phase = self.new_phase()
                nodes.append(phase)
            elif not isinstance(s, Instr) and _has_barrier(s):
                raise PhaseError(f"line {s.line}: a barrier (sync_units) under control flow that "
                                   f"differs between units is not supported on the C target")
            else:
                phase.stmts.append(s)
                for inner in ir.walk([s]):
                    if isinstance(inner, Instr) and inner.result is not None:
                        self.site[inner.result] = phase
                    elif isinstance(inner, For):
                        self.site[inner.var] = phase
        return nodes

    def hoist(self, values: tuple) -> bool:
        """Move the uniform instructions computing `values` to cube level; False if one is varying."""
        todo, found = list(values), []
        while todo:
            v = todo.pop()
            site = self.site.get(v)
            if site == "cube" or any(v is i.result for i in found):
                continue
            if not isinstance(site, Phase):
                return False
            instr = next((s for s in site.stmts if isinstance(s, Instr) and s.result is v), None)
            if instr is None or not self._uniform(instr):
                return False
            found.append(instr)
            todo.extend(instr.args)
        for instr in found:
            phase = self.site[instr.result]
            phase.stmts.remove(instr)
            phase.hoisted.append(instr)
            self.site[instr.result] = "cube"
        for p in self.phases:  # keep program order among the hoisted instructions of a phase
            p.hoisted.sort(key=lambda i: i.result.id)
        return True

    def _uniform(self, instr: Instr) -> bool:
        if instr.op == "builtin":
            return instr.attr not in ir.VARYING_BUILTINS
        if instr.op in ir.LOADS:
            return self.hoist_loads and instr.attr.kind == "global" and instr.attr not in self.written
        return ir.is_pure(instr) and instr.op != "read"


def _has_loop(s) -> bool:
    """A loop under `s`: a uniform branch around one is lifted like the loop itself would be, so the unit loop
    stays innermost (gcc vectorizes no unit loop with a loop inside)."""
    return any(isinstance(i, For) for i in ir.walk([s]) if i is not s)


def _has_lut(s) -> bool:
    """A look-up under `s`: a uniform branch around one is lifted, so that the look-up cuts the phases."""
    return any(isinstance(i, Instr) and i.op == "lut16" for i in ir.walk([s]))


def _has_barrier(s) -> bool:
    return any(isinstance(i, Instr) and i.op == "sync_units" for i in ir.walk([s]))
