"""Constant folding: evaluate ops whose operands are all constants, and simplify the obvious.

Arithmetic follows the kernel semantics every target shares (docs/cube.md, "Integer semantics"): integer
division and remainder truncate toward zero and give 0 by 0, integers wrap at their width, shifts past
the width give 0 or the sign, float to int casts follow `dtype.float_to_int`, f16/bf16 arithmetic
happens in f32 (rounding only at casts). Beyond folding: `x + 0`, `x - 0`, `x * 1`, `x / 1`, int `x * 0`,
`select` on a constant, `if` on a constant (its taken branch is spliced in) and loops that run zero times
(removed).

Example:
    >>> # %2 = add (const 2), (const 3) : i32   becomes   %2 = const 5 : i32
    >>> fold_constants(kernel)
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ...dtype import float_to_int
from .. import ir
from ..ir import If, Instr

_NP_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum,
              "max": np.maximum, "pow": np.power, "and": np.bitwise_and, "or": np.bitwise_or,
              "xor": np.bitwise_xor, "atan2": np.arctan2, "eq": np.equal, "ne": np.not_equal, "lt": np.less,
              "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}
_NP_UNARY = {"exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2,
             "log10": np.log10, "log1p": np.log1p, "asin": np.arcsin, "acos": np.arccos,
             "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
             "acosh": np.arccosh, "atanh": np.arctanh,
             "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh,
             "floor": np.floor, "ceil": np.ceil, "round": np.rint, "trunc": np.trunc, "neg": np.negative,
             "abs": np.abs, "not": np.logical_not, "bitwise_not": np.invert}


def _np_type(dtype):
    # f16/bf16 compute in f32 on every target
    return np.float32 if dtype.name in ("f16", "bf16") else dtype.np.type


def _wrap(value: int, dtype) -> int:
    bits = dtype.itemsize * 8
    value &= (1 << bits) - 1
    if dtype.signed and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def evaluate(op: str, values: list, types: list, result: ir.Type, attr=None):
    """The constant result of `op`, or None when it cannot (or should not) be folded."""
    src = types[0].dtype if types else result.dtype
    with np.errstate(all="ignore"):
        if op == "cast":
            x = values[0]
            if result.dtype is ir.bool_:
                return bool(x)
            if result.dtype.is_float:
                return float(np.asarray(x, dtype=np.float64).astype(result.dtype.np))
            return int(float_to_int(x, result.dtype)) if isinstance(x, float) else _wrap(int(x), result.dtype)
        if op == "select":
            return values[1] if values[0] else values[2]
        if op == "mulhi":
            return (values[0] * values[1]) >> 32
        if op == "mad8":
            return _wrap(values[0] + values[1] * values[2], result.dtype)
        if op == "fma":
            npt = _np_type(src)
            return _fma(*(float(npt(v)) for v in values), npt)
        if not src.is_float and src is not ir.bool_ and op in ("div", "rem", "shl", "shr"):
            a, b = values
            if op in ("div", "rem"):
                if b == 0:
                    return 0
                q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
                return _wrap(q if op == "div" else a - b * q, src)
            if not 0 <= b < src.itemsize * 8:  # past the width: 0, or the sign for a signed >>
                return -1 if op == "shr" and a < 0 else 0
            return _wrap(a << b if op == "shl" else a >> b, src)
        npt = _np_type(src)
        args = [npt(v) for v in values]
        if op in _NP_BINARY:
            out = _NP_BINARY[op](*args)
        elif op in _NP_UNARY:
            out = _NP_UNARY[op](*args)
        elif op == "div":
            out = np.divide(*args)
        elif op == "rem":
            out = np.fmod(*args)
        elif op == "rsqrt":
            out = npt(1) / np.sqrt(args[0])
        elif op == "reciprocal":
            out = npt(1) / args[0]
        else:
            return None  # erf and friends: left to the target's math library
    if result.dtype is ir.bool_:
        return bool(out)
    if result.dtype.is_float:
        return float(out)
    return _wrap(int(out), result.dtype)


def _fma(a: float, b: float, c: float, npt) -> float | None:
    """a * b + c rounded once to `npt` (f32 or f64): the exact value's nearest, ties to even; None where
    an operand or the product is not finite (left to the target)."""
    if not all(math.isfinite(v) for v in (a, b, c)):
        return None
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    near = npt(float(exact))  # float() of a Fraction rounds once to f64; f32 may need a neighbour
    if not np.isfinite(near):
        return None
    if npt is np.float64:
        return float(near)
    candidates = (np.nextafter(near, npt(-np.inf)), near, np.nextafter(near, npt(np.inf)))
    best = min(candidates, key=lambda v: (abs(Fraction(float(v)) - exact), int(np.asarray(v).view(np.uint32)) & 1))
    return float(best)


def fold_constants(kernel: ir.Kernel) -> None:
    """Fold in place (see the module docstring)."""
    consts: dict = {}
    mapping: dict = {}
    kernel.body[:] = _fold_block(kernel.body, consts, mapping)
    ir.substitute(kernel.body, mapping)


def _fold_block(block: list, consts: dict, mapping: dict) -> list:
    out = []
    for s in block:
        if isinstance(s, Instr):
            s.args = tuple(mapping.get(a, a) for a in s.args)
            _fold_instr(s, consts, mapping)
            if s.result is None or s.result not in mapping:
                out.append(s)
        elif isinstance(s, If):
            s.cond = mapping.get(s.cond, s.cond)
            if s.cond in consts:  # constant condition: keep only the branch that runs
                out.extend(_fold_block(s.then if consts[s.cond] else s.orelse, consts, mapping))
                continue
            s.then = _fold_block(s.then, consts, mapping)
            s.orelse = _fold_block(s.orelse, consts, mapping)
            out.append(s)
        else:
            s.start, s.stop, s.step = (mapping.get(v, v) for v in (s.start, s.stop, s.step))
            if all(v in consts for v in (s.start, s.stop, s.step)):
                start, stop, step = consts[s.start], consts[s.stop], consts[s.step]
                if not range(start, stop, step):
                    continue
            s.body = _fold_block(s.body, consts, mapping)
            out.append(s)
    return out


def _fold_instr(s: Instr, consts: dict, mapping: dict) -> None:
    if s.op == "const":
        consts[s.result] = s.attr
        return
    if s.result is None or not ir.is_pure(s) or s.op in ("read", "builtin", "len"):
        return
    if s.result.type.lanes > 1 or any(a.type.lanes > 1 for a in s.args):
        return
    if s.args and all(a in consts for a in s.args):
        value = evaluate(s.op, [consts[a] for a in s.args], [a.type for a in s.args], s.result.type)
        if value is not None:
            s.op, s.args, s.attr = "const", (), value
            consts[s.result] = value
            return
    simpler = _simplify(s, consts)
    if simpler is not None:
        mapping[s.result] = simpler


def _simplify(s: Instr, consts: dict):
    """An existing value equal to `s`'s result (an algebraic identity), or None."""
    args = s.args
    c = [consts.get(a) for a in args]
    if s.op == "select" and c[0] is not None:
        return args[1] if c[0] else args[2]
    if len(args) != 2:
        return None
    a, b = args
    is_int = not s.result.type.dtype.is_float
    if s.op == "add":
        if c[1] == 0 and c[1] is not False:
            return a
        if c[0] == 0 and c[0] is not False:
            return b
    if s.op == "sub" and c[1] == 0:
        return a
    if s.op == "mul":
        if c[1] == 1:
            return a
        if c[0] == 1:
            return b
        if is_int and (c[0] == 0 or c[1] == 0):
            return args[0] if c[0] == 0 else args[1]
    if s.op == "div" and c[1] == 1:
        return a
    if s.op in ("and", "or") and s.result.type.dtype is ir.bool_:
        neutral = s.op == "and"
        if c[0] is neutral:
            return b
        if c[1] is neutral:
            return a
    return None
