"""Which primitives fuse, and the kernel IR each one becomes inside a fused kernel.

Elementwise primitives become the kernel library's own `unary_op` / `binary_op` cube functions,
inlined into the fused kernel (so a fused `gelu` or `remainder` computes exactly what the unfused
kernel computes), with the same special cases as the Cube(cpu) lowering table: bools take `or`/`and`
for max/min, unsigned `sign` is `x != 0`, `abs` of bools is the identity. Cases the library refuses
(float-only binary ops on ints, shifts of bools) do not fuse and run through the inner backend.

Reductions that fuse on read are `sum`, `prod`, `amax` and `amin`.

Example:
    >>> elementwise(registry["exp"], (f32,)), elementwise(registry["div"], (i32, i32))
    (True, False)
"""

from __future__ import annotations

from typing import Sequence

from ...cube import ir
from ...cube.kernels.elementwise import BINARY_OPS, FLOAT_BINARY, UNARY_OPS, binary_op, unary_op
from ...dtype import DType, bool_
from ...ops.primitive import Primitive

REDUCTIONS = ("sum", "prod", "amax", "amin")
_UNARY = frozenset(UNARY_OPS)
_BINARY = frozenset(BINARY_OPS)
_OTHER = frozenset(("where", "cast", "isnan", "isinf"))
_BOOL_OP = {"maximum": "logical_or", "minimum": "logical_and"}


def records(prim: Primitive, inputs: Sequence) -> bool:
    """Whether the fusion backend records `prim` on `inputs` (handles with an `aval`) instead of running
    it: an elementwise op that fuses, or a reduction. Decided once per primitive where dtypes do not
    matter (the dispatch hot path)."""
    known = _RECORDS.get(prim)
    if known is None:
        return reduction(prim) or elementwise(prim, [h.aval.dtype for h in inputs])
    return known


def elementwise(prim: Primitive, dtypes: Sequence[DType]) -> bool:
    """Whether `prim` on inputs of `dtypes` fuses into an elementwise kernel."""
    name = prim.name
    if name in _UNARY or name in _OTHER:
        return True
    if name in _BINARY:
        if name in FLOAT_BINARY and not dtypes[0].is_float:
            return False
        return not (name.endswith("_shift") and dtypes[0] is bool_)
    return False


def reduction(prim: Primitive) -> bool:
    """Whether `prim` is a reduction that can read a fused elementwise program."""
    return prim.name in REDUCTIONS


_RECORDS: dict = {}  # primitive -> whether it is recorded, for those whose answer ignores dtypes


def _settle() -> None:
    from ...ops import registry
    for prim in registry.values():
        if prim.name in REDUCTIONS or prim.name in _UNARY or prim.name in _OTHER:
            _RECORDS[prim] = True
        elif prim.name not in _BINARY:
            _RECORDS[prim] = False
        elif prim.name not in FLOAT_BINARY and not prim.name.endswith("_shift"):
            _RECORDS[prim] = True


def static_params(prim: Primitive, params: dict) -> tuple:
    """The params a plan depends on: those that shape a fused kernel (cast's dtype, reduced dims)."""
    name = prim.name
    if name == "cast":
        return (params["dtype"],)
    if name in REDUCTIONS:
        return (params["dims"], params["keepdim"])
    return ()


def emit(b: ir.Builder, name: str, params: tuple, args: list, out: DType) -> ir.Value:
    """IR computing primitive `name` on kernel values `args`, giving a value of dtype `out`."""
    x = args[0]
    t = x.type.dtype
    if name == "cast":
        return b.cast(x, out)
    if name == "where":
        return b.select(b.cast(x, bool_), args[1], args[2])
    if name == "isnan":
        return b.binary("ne", x, x) if t.is_float else b.const(False, bool_)
    if name == "isinf":
        if not t.is_float:
            return b.const(False, bool_)
        return b.binary("eq", b.unary("abs", x), b.const(float("inf"), t))
    if name in _UNARY:
        if name == "abs" and t is bool_:
            return x
        if name == "sign" and t.name == "u8":
            return b.cast(b.binary("ne", x, b.const(0, t)), t)
        return unary_op.__cube_inline__(b, [name, x], {})
    op = _BOOL_OP.get(name, name) if t is bool_ else name
    return binary_op.__cube_inline__(b, [op, x, args[1]], {})


_settle()
