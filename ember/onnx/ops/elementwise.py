"""Elementwise ONNX ops: arithmetic, comparison, logic, bitwise, math functions, casts.

ONNX broadcasts as NumPy does, as ember does; where ONNX keeps the input's type and ember would
promote (integer Div truncates, Pow keeps the base's type, Mod's sign rule), the functions say so.

Example:
    >>> OPS[("", "Add")](call, a, b)
"""

from __future__ import annotations

import functools

import numpy as np

from ...api import math as M
from .. import values
from ..proto import dtype_of, type_name
from .registry import op

_UNARY = {
    "Abs": M.abs, "Neg": M.neg, "Exp": M.exp, "Log": M.log, "Sqrt": M.sqrt, "Reciprocal": M.reciprocal,
    "Floor": M.floor, "Ceil": M.ceil, "Sin": M.sin, "Cos": M.cos, "Tan": M.tan, "Asin": M.asin,
    "Acos": M.acos, "Atan": M.atan, "Sinh": M.sinh, "Cosh": M.cosh, "Asinh": M.asinh, "Acosh": M.acosh,
    "Atanh": M.atanh, "Tanh": M.tanh, "Sigmoid": M.sigmoid, "Erf": M.erf, "Sign": M.sign,
    "Round": M.round, "IsNaN": M.isnan, "Not": M.logical_not, "BitwiseNot": M.bitwise_not,
}
_BINARY = {
    "Add": M.add, "Sub": M.sub, "Mul": M.mul, "Less": M.lt, "Greater": M.gt,
    "LessOrEqual": M.le, "GreaterOrEqual": M.ge, "And": M.logical_and, "Or": M.logical_or,
    "Xor": M.logical_xor, "BitwiseAnd": M.bitwise_and, "BitwiseOr": M.bitwise_or,
    "BitwiseXor": M.bitwise_xor,
}


def _unary(fn):
    return lambda call, x: fn(x)


def _binary(fn):
    return lambda call, a, b: fn(a, b)


for _name, _fn in _UNARY.items():
    op(_name)(_unary(_fn))
for _name, _fn in _BINARY.items():
    op(_name)(_binary(_fn))


@op("Equal")
def equal(call, a, b):
    if values.is_host(a) or values.is_host(b):  # strings
        return call.const(np.asarray(call.host(a) == call.host(b), bool))
    return M.eq(a, b)


@op("Div")
def div(call, a, b):
    if a.dtype.is_float:
        return M.div(a, b)
    return M.div(a, b, rounding_mode="trunc").cast(a.dtype)


@op("Pow")
def pow_(call, x, y):
    if x.dtype.is_float or not y.dtype.is_float:
        return M.pow(x, y.cast(x.dtype) if x.dtype.is_float else y).cast(x.dtype)
    return M.pow(x.cast(y.dtype), y).cast(x.dtype)


@op("Mod")
def mod(call, a, b):
    if call.attr("fmod", 0):
        return M.fmod(a, b)
    return M.remainder(a, b)


@op("BitShift")
def bit_shift(call, x, y):
    direction = call.attr("direction")
    return M.bitwise_left_shift(x, y) if direction == "LEFT" else M.bitwise_right_shift(x, y)


@op("IsInf")
def is_inf(call, x):
    neg, pos = call.attr("detect_negative", 1), call.attr("detect_positive", 1)
    inf = M.isinf(x)
    if neg and pos:
        return inf
    if not (neg or pos):
        return M.logical_and(inf, M.logical_not(inf))
    return M.logical_and(inf, x > 0 if pos else x < 0)


def _variadic(fn, *xs):
    return functools.reduce(fn, xs)


@op("Max")
def max_(call, *xs):
    return _variadic(M.maximum, *xs)


@op("Min")
def min_(call, *xs):
    return _variadic(M.minimum, *xs)


@op("Sum")
def sum_(call, *xs):
    return _variadic(M.add, *xs)


@op("Mean")
def mean(call, *xs):
    return _variadic(M.add, *xs) / len(xs)


@op("Where")
def where(call, cond, a, b):
    return M.where(cond, a, b)


@op("Clip")
def clip(call, x, lo=None, hi=None):
    if call.opset < 11:
        lo, hi = call.attr("min", None), call.attr("max", None)
    if lo is not None:
        x = M.clamp(x, min=lo) if isinstance(lo, float) else M.maximum(x, lo.reshape(()).cast(x.dtype))
    if hi is not None:
        x = M.clamp(x, max=hi) if isinstance(hi, float) else M.minimum(x, hi.reshape(()).cast(x.dtype))
    return x


def convert(call, x, code: int):
    """`x` as ONNX type `code`: a held type by ember's cast, an emulated one in its holder (rounded
    to the narrow format on the host, `values.encode`), strings on the host."""
    if code == values.STRING:
        return call.host(x).astype(np.str_).astype(object)
    if values.is_host(x):
        return call.const(x.astype(values.np_dtype(code)))
    d = values.holder(code)
    if d is None:
        call.unsupported(f"cast to {type_name(code)}, which ember neither holds nor emulates")
    if code in values.MASKS or code in (12, 13) or dtype_of(code) is not None:
        return x.cast(d)
    return values.encode(x, code, bool(call.attr("saturate", 1)), call.attr("round_mode", "up"))


@op("Cast")
def cast(call, x):
    return convert(call, x, call.attr("to"))


@op("BitCast")
def bit_cast(call, x):
    """The bits of `x` read as type `to` (same width): reinterpreted on the host, as ember has no
    bit cast (a copy through the host on other devices)."""
    a = values.to_output(x, call.node.in_types[0])  # an emulated type in its own width again
    return values.to_value(call.host(a).view(values.np_dtype(call.attr("to"))), call.device)


@op("CastLike")
def cast_like(call, x, like):
    code = call.out_type(0)
    return convert(call, x, code) if code is not None else x.cast(like.dtype)


@op("Identity")
def identity(call, x):
    return x
