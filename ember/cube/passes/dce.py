"""Dead-code elimination: drop pure instructions and loads nobody reads, variables nobody reads, and
empty loops and branches.

Runs to a fixed point, since deleting one unused value can leave its operands unused.

Example:
    >>> # %3 = exp %1 : f32   (never used)   -> removed
    >>> eliminate_dead_code(kernel)
"""

from __future__ import annotations

from .. import ir
from ..ir import For, If, Instr


def eliminate_dead_code(kernel: ir.Kernel) -> None:
    """Remove dead code in place."""
    while True:
        uses = ir.use_counts(kernel.body)
        read_locals = {s.attr for s in ir.walk(kernel.body) if isinstance(s, Instr) and s.op == "read"}
        if not _sweep(kernel.body, uses, read_locals):
            return


def _dead(s, uses: dict, read_locals: set) -> bool:
    if isinstance(s, Instr):
        if s.op in ("local", "write"):
            return s.attr not in read_locals
        return (ir.is_pure(s) or s.op in ir.LOADS) and uses.get(s.result, 0) == 0
    if isinstance(s, If):
        return not s.then and not s.orelse
    return not s.body


def _sweep(block: list, uses: dict, read_locals: set) -> bool:
    changed = False
    keep = []
    for s in block:
        if isinstance(s, If):
            changed |= _sweep(s.then, uses, read_locals)
            changed |= _sweep(s.orelse, uses, read_locals)
        elif isinstance(s, For):
            changed |= _sweep(s.body, uses, read_locals)
        if _dead(s, uses, read_locals):
            changed = True
        else:
            keep.append(s)
    block[:] = keep
    return changed
