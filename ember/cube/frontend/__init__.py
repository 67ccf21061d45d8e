"""The frontend: walk a kernel's Python AST and emit IR, folding comptime values on the way.

A kernel body is *traced*, not executed: each expression evaluates either to a plain Python value
(a comptime value: a number, a tuple, a dtype) or to an IR `Value`. Operations between Python values
happen in Python, so comptime arithmetic, comptime `if` and loops over comptime ranges (under
`cube.unroll`) leave no trace in the IR. Operations touching a `Value` emit instructions.

Python names map onto SSA values. A name that is reassigned inside a runtime loop or branch and read
afterwards (or on the next iteration) becomes an IR `Local`, declared just before the outermost
loop/branch that assigns it; everything else stays SSA.

Example (what `trace` produces for `y[i] = x[i] * 2.0` inside `if i < n`):
    %0 = builtin 'absolute_pos' : i32
    %2 = lt %0, %1 : bool
    if %2 { %3 = load %0, x : f32; %4 = const 2.0 : f32; %5 = mul %3, %4 : f32; store %0, %5, y }
"""

from __future__ import annotations

from .. import ir
from .expressions import Expressions
from .source import ArrayRef, Source, VarRef, VarTuple
from .statements import Statements, _loaded_names


class Tracer(Statements, Expressions):
    """Traces one function body into `builder`. Helpers (`@cube.function`) get their own Tracer."""

    def __init__(self, builder: ir.Builder, source: Source, env: dict, is_kernel: bool) -> None:
        self.b = builder
        self.src = source
        self.env = env
        self.ns = source.namespace()
        self.is_kernel = is_kernel
        self.runtime_depth = 0  # how many runtime loops/branches enclose the statement being traced
        self.pending: dict = {}  # name -> [block, index]: where to declare it if it is assigned
        self.result = None
        self._all_loads = _loaded_names(source.tree)


__all__ = ["Tracer", "Source", "ArrayRef", "VarRef", "VarTuple"]
