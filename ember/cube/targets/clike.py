"""The C-family pieces of a renderer: type names, literals, and the expression of each scalar op.

Kept apart from the C renderer so that another C-family target (CUDA C, Metal, OpenCL) can reuse
them. f16/bf16 are computed in `float` and kept in memory as `ember_f16` / `uint16_t`; the target's
prelude defines `ember_f16` and the conversion helpers (`ember_f16_load/store/round`,
`ember_bf16_load/store/round`). Narrow integers are brought back to their type after
C's promotion to int; integer division and remainder truncate, as the IR specifies.

Example:
    >>> scalar_expr("add", ["a", "b"], [ir.Type(f32)] * 2, ir.Type(f32))
    '(a + b)'
"""

from __future__ import annotations

import math

from ...dtype import bool_, bf16, f16, f64
from .. import ir


class RenderError(ValueError):
    """An op or type a C-family target has no rendering for."""


_STORAGE = {"f64": "double", "f32": "float", "f16": "ember_f16", "bf16": "uint16_t", "i64": "int64_t",
            "i32": "int32_t", "i16": "int16_t", "i8": "int8_t", "u8": "uint8_t", "u32": "uint32_t",
            "u64": "uint64_t", "bool": "uint8_t"}
_COMPUTE = dict(_STORAGE, f16="float", bf16="float", bool="_Bool")
_BINARY_C = {"add": "+", "sub": "-", "mul": "*", "div": "/", "and": "&", "or": "|", "xor": "^",
             "shl": "<<", "shr": ">>", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_MATH_C = {name: name for name in ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "sin",
                                   "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh",
                                   "acosh", "atanh", "erf", "floor", "ceil", "trunc", "pow", "atan2")}
_MATH_C.update(round="rint", rem="fmod")


def storage_type(dtype) -> str:
    return _STORAGE[dtype.name]


def compute_type(t: ir.Type) -> str:
    scalar = _COMPUTE[t.dtype.name]
    if t.lanes == 1:
        return scalar
    return f"ember_{t.dtype.name}x{t.lanes}"


def literal(value, dtype) -> str:
    if dtype.is_float:
        suffix = "" if dtype is f64 else "f"
        if math.isnan(value):
            return "((float)NAN)" if suffix else "((double)NAN)"
        if math.isinf(value):
            return f"({'-' if value < 0 else ''}({'float' if suffix else 'double'})INFINITY)"
        return f"{float(value).hex()}{suffix}"
    if dtype is bool_:
        return "1" if value else "0"
    if dtype.name == "i64" and value == -(1 << 63):
        return "(-9223372036854775807LL - 1)"
    suffix = {"i64": "LL", "u64": "ULL", "u32": "u"}.get(dtype.name, "")
    return f"(({_COMPUTE[dtype.name]}){value}{suffix})"


def from_storage(x: str, dtype) -> str:
    if dtype is bf16:
        return f"ember_bf16_load({x})"
    if dtype is f16:
        return f"ember_f16_load({x})"
    if dtype is bool_:
        return f"(_Bool){x}"
    return x


def to_storage(x: str, dtype) -> str:
    if dtype is bf16:
        return f"ember_bf16_store({x})"
    if dtype is f16:
        return f"ember_f16_store({x})"
    if dtype is bool_:
        return f"(uint8_t)({x})"
    return x


def round_to(x: str, dtype) -> str:
    """A float holding an f16/bf16 value must be rounded to that format after a cast."""
    if dtype is f16:
        return f"ember_f16_round({x})"
    if dtype is bf16:
        return f"ember_bf16_round({x})"
    return x


def scalar_expr(op: str, a: list, types: list, t: ir.Type) -> str:
    """C for one scalar op whose operands are already rendered as `a` (compute types)."""
    src = types[0].dtype if types else t.dtype
    is_float = src.is_float
    fsuffix = "f" if is_float and src is not f64 else ""
    if op == "cast":
        if t.dtype is bool_:
            return f"({a[0]} != 0)"
        return round_to(f"(({_COMPUTE[t.dtype.name]}){a[0]})", t.dtype)
    if op in ("min", "max"):
        cmp = "<" if op == "min" else ">"
        return f"({a[0]} {cmp} {a[1]} ? {a[0]} : {a[1]})"
    if op == "select":
        return f"({a[0]} ? {a[1]} : {a[2]})"
    if op == "mulhi":
        return f"((uint32_t)(((uint64_t){a[0]} * (uint64_t){a[1]}) >> 32))"
    if op == "splat":
        return a[0]
    if op == "neg":
        return f"(-{a[0]})"
    if op == "not":
        return f"(!{a[0]})"
    if op == "bitnot":
        return f"(~{a[0]})"
    if op == "abs":
        return f"fabs{fsuffix}({a[0]})" if is_float else f"({a[0]} < 0 ? -{a[0]} : {a[0]})"
    if op == "rsqrt":
        return f"(({_COMPUTE[src.name]})1 / sqrt{fsuffix}({a[0]}))"
    if op == "recip":
        return f"(({_COMPUTE[src.name]})1 / {a[0]})"
    if op == "rem" and not is_float:
        return f"({a[0]} % {a[1]})"
    if op in _MATH_C and (is_float or op not in ("rem",)):
        return f"{_MATH_C[op]}{fsuffix}({', '.join(a)})"
    if op in _BINARY_C:
        expr = f"({a[0]} {_BINARY_C[op]} {a[1]})"
        # C promotes narrow ints to int: bring the result back to the value's type.
        if not is_float and src.itemsize < 4 and op not in ("eq", "ne", "lt", "le", "gt", "ge"):
            return f"(({_COMPUTE[t.dtype.name]}){expr})"
        return expr
    raise RenderError(f"no C rendering for {op}")
