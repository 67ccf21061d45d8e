"""Rows of the elementwise primitives: unary math, binary arithmetic and comparison, `where`, `cast`.

Where torch's own op differs from ember's definition the row spells ember's out with torch ops:
integer division and remainder by 0 give 0 and MIN // -1 gives MIN (torch raises or traps), shifts by a
negative amount or by the width or more give 0 (left) or the sign (right), and floats cast to integers
are truncated to 32 bits (64 for i64), NaN and values out of that range giving its minimum, then wrapped
(torch leaves that to the hardware: CUDA saturates). f16 and bf16 compute in f32 and round once.

Example:
    >>> ROWS["add"](Aval((2,), f32), torch.ones(2), torch.ones(2))
    tensor([2., 2.])
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .convert import f32_for_halves, tdtype


def _unary(fn):
    return f32_for_halves(lambda out, x: fn(x))


def _binary(fn):
    return f32_for_halves(lambda out, a, b: fn(a, b))


UNARY = {
    "neg": torch.neg, "sign": torch.sign, "reciprocal": torch.reciprocal, "exp": torch.exp,
    "exp2": torch.exp2, "expm1": torch.expm1, "log": torch.log, "log2": torch.log2, "log10": torch.log10,
    "log1p": torch.log1p, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "sin": torch.sin, "cos": torch.cos,
    "tan": torch.tan, "asin": torch.asin, "acos": torch.acos, "atan": torch.atan, "sinh": torch.sinh,
    "cosh": torch.cosh, "tanh": torch.tanh, "asinh": torch.asinh, "acosh": torch.acosh, "atanh": torch.atanh,
    "erf": torch.erf, "erfinv": torch.erfinv, "sigmoid": torch.sigmoid, "gelu": F.gelu, "floor": torch.floor,
    "ceil": torch.ceil, "round": torch.round, "trunc": torch.trunc,
}


_abs_number = _unary(torch.abs)


def _abs(out, x):
    return x if x.dtype == torch.bool else _abs_number(out, x)  # torch has no bool abs


def _plain(fn):
    return lambda out, *xs: fn(*xs)


# ---- integer division ----------------------------------------------------------------------------

def _integer_quotient(a, b, op):
    """`op(a, b)` for integers with b == 0 (and b == -1, which traps on MIN) answered without dividing:
    division by 0 gives 0, x // -1 gives -x (MIN wraps to MIN) and x % -1 gives 0."""
    by_zero = b == 0
    if not a.dtype.is_signed:
        return torch.where(by_zero, 0, op(a, torch.where(by_zero, 1, b))).to(a.dtype)
    by_minus_one = b == -1
    result = op(a, torch.where(by_zero | by_minus_one, 1, b))
    if op is torch.floor_divide:
        result = torch.where(by_minus_one, torch.neg(a), result)
    else:
        result = torch.where(by_minus_one, 0, result)
    return torch.where(by_zero, 0, result).to(a.dtype)


def _divide_like(op):
    def run(out, a, b):
        if a.dtype.is_floating_point or a.dtype == torch.bool:
            return op(a, b)
        return _integer_quotient(a, b, op)

    return f32_for_halves(run)


# ---- shifts --------------------------------------------------------------------------------------

def _shift(left: bool):
    def run(out, a, b):
        bits = a.element_size() * 8
        inside = (b >= 0) & (b < bits)
        amount = torch.where(inside, b, torch.zeros_like(b))
        if left:
            return torch.where(inside, torch.bitwise_left_shift(a, amount), 0).to(a.dtype)
        shifted = torch.bitwise_right_shift(a, amount)
        sign = torch.where(a < 0, -1, 0).to(a.dtype) if a.dtype.is_signed else torch.zeros_like(a)
        return torch.where(inside, shifted, sign)

    return run


BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.true_divide, "pow": torch.pow,
    "maximum": torch.maximum, "minimum": torch.minimum, "atan2": torch.atan2,
}

# Exact in any dtype (no rounding): torch's op as it is.
EXACT = {
    "isnan": torch.isnan, "isinf": torch.isinf, "logical_not": torch.logical_not, "bitwise_not": torch.bitwise_not,
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or, "logical_xor": torch.logical_xor,
    "bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor,
}


# ---- where and cast ------------------------------------------------------------------------------

def _float_to_int(x, dtype: torch.dtype):
    """Floats truncated toward zero to an integer dtype as `ember.dtype.float_to_int` defines it."""
    wide = torch.int64 if dtype == torch.int64 else torch.int32
    bound = float(2 ** (torch.iinfo(wide).bits - 1))
    t = torch.trunc(x.to(torch.float64 if x.device.type != "mps" else torch.float32))
    inside = (t >= -bound) & (t < bound)
    truncated = torch.where(inside, t, 0).to(wide)
    return torch.where(inside, truncated, torch.iinfo(wide).min).to(dtype)


def _cast(out, x, *, dtype):
    target = tdtype(dtype)
    if dtype.is_bool:
        return x != 0
    if x.dtype.is_complex and not dtype.is_complex:
        x = x.real  # PyTorch's cast discards the imaginary part (with a warning)
    if dtype.is_int and x.dtype.is_floating_point:
        return _float_to_int(x, target)
    return x.to(target)


ROWS = {
    **{name: _unary(fn) for name, fn in UNARY.items()},
    "abs": _abs,
    **{name: _binary(fn) for name, fn in BINARY.items()},
    **{name: _plain(fn) for name, fn in EXACT.items()},
    "remainder": _divide_like(torch.remainder),
    "floor_divide": _divide_like(torch.floor_divide),
    "left_shift": _shift(True),
    "right_shift": _shift(False),
    "where": _plain(torch.where),
    "cast": _cast,
}
"""Primitive name -> `row(out_aval, *tensors, **params) -> tensor`."""
