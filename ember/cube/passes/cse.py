"""Common-subexpression elimination over structured IR.

Two pure instructions with the same op, operands, attribute and type compute the same value; the
later one is replaced by the earlier when the earlier dominates it. In structured code an
instruction dominates everything after it in its own block and in blocks nested there, so a scoped
table (outer entries visible inside, inner entries dropped at the end of a block) is enough.
Local reads are never merged (a write may come between). Loads are merged too, unless a store or
atomic to the same array, or a barrier (other units may have written), comes between them; a loop
forgets the loads of every array it writes before its body is visited.

Example:
    >>> # %3 = mul %1, %2 ; %4 = mul %1, %2 ; %5 = add %3, %4   ->   %5 = add %3, %3
    >>> eliminate_common_subexpressions(kernel)
"""

from __future__ import annotations

from .. import ir
from ..ir import If, Instr


def _attr_key(attr):
    if isinstance(attr, (ir.Array, ir.Local)):
        return ("obj", id(attr))
    if isinstance(attr, float):
        return ("float", attr.hex())  # keeps 0.0 and -0.0 apart
    return (type(attr).__name__, attr)


def eliminate_common_subexpressions(kernel: ir.Kernel) -> None:
    """Merge duplicate pure instructions and redundant loads in place."""
    mapping: dict = {}
    _cse_block(kernel.body, [{}], mapping)
    ir.substitute(kernel.body, mapping)


def _written(stmts: list) -> set:
    """Arrays a statement list may write; None stands for "every array" (a barrier)."""
    out = set()
    for s in ir.walk(stmts):
        if isinstance(s, Instr):
            if ir.written_array(s) is not None:
                out.add(ir.written_array(s))
            elif s.op == "sync_units":
                out.add(None)
    return out


def _forget(scopes: list, arrays: set) -> None:
    for scope in scopes:
        for key in [k for k in scope if k[0] in ir.LOADS and (None in arrays or k[2] in arrays)]:
            del scope[key]


def _cse_block(block: list, scopes: list, mapping: dict) -> None:
    keep = []
    for s in block:
        if isinstance(s, Instr):
            s.args = tuple(mapping.get(a, a) for a in s.args)
            if s.result is not None and ((ir.is_pure(s) and s.op != "read") or s.op in ir.LOADS):
                attr = s.attr if s.op in ir.LOADS else _attr_key(s.attr)
                key = (s.op, tuple(id(a) for a in s.args), attr, s.result.type)
                found = next((scope[key] for scope in reversed(scopes) if key in scope), None)
                if found is not None:
                    mapping[s.result] = found
                    continue
                scopes[-1][key] = s.result
            elif s.op == "sync_units" or ir.written_array(s) is not None:
                _forget(scopes, {ir.written_array(s)} if s.op != "sync_units" else {None})
            keep.append(s)
        elif isinstance(s, If):
            s.cond = mapping.get(s.cond, s.cond)
            _cse_block(s.then, scopes + [{}], mapping)
            _cse_block(s.orelse, scopes + [{}], mapping)
            _forget(scopes, _written(s.then + s.orelse))
            keep.append(s)
        else:
            s.start, s.stop, s.step = (mapping.get(v, v) for v in (s.start, s.stop, s.step))
            _forget(scopes, _written(s.body))
            _cse_block(s.body, scopes + [{}], mapping)
            keep.append(s)
    block[:] = keep
