"""Elementwise math: arithmetic, powers, exponentials, trigonometry, rounding, comparisons, logic, bits.

Operands follow PyTorch's promotion (`ember.dtype.result_type`) and broadcasting. Float-only functions
(exp, sin, ...) turn int and bool tensors into the default float first, as PyTorch does. Comparisons
and logical functions give bool tensors.

Example:
    >>> x = ember.tensor([1, 2, 3])
    >>> (x / 2).tolist(), (x // 2).tolist(), (x > 1).tolist()
    ([0.5, 1.0, 1.5], [0, 1, 1], [False, True, True])
"""

from __future__ import annotations

import numpy as np

from .. import amp
from ..dtype import bf16, bool_, default_float, f16, f32, result_type
from ..errors import DTypeError
from ..ops.elementwise import TABLE
from ._common import Tensor, apply, bind, promote, registry, scalar_like, to_tensor_like
from .creation import tensor

FLOAT_UNARY = tuple(name for name, row in TABLE.items() if row.promotes)
"""The float-only functions that turn int and bool tensors into the default float first (the op table's
promoting rows)."""
AUTOCAST_F32 = ("exp", "expm1", "log", "log2", "log10", "log1p", "rsqrt", "reciprocal", "tan", "asin", "acos",
                "sinh", "cosh", "erfinv")
"""The unary ops that autocast runs in f32 (PyTorch's list)."""


def _float_unary(name: str):
    def op(x: Tensor) -> Tensor:
        if not x.dtype.is_inexact:
            x = x.cast(default_float())
        return apply(name, x)

    op.__name__ = name
    op.__doc__ = f"Elementwise `{name}` (ints and bools become the default float first).\n\n" \
                 f"Example:\n    >>> ember.tensor([0.5]).{name}()\n"
    return op


for _name in FLOAT_UNARY:
    globals()[_name] = amp.float32(_float_unary(_name)) if _name in AUTOCAST_F32 else _float_unary(_name)


def neg(x: Tensor) -> Tensor:
    """`-x`. Example: `(-ember.tensor([1, -2])).tolist() == [-1, 2]`."""
    if x.dtype.is_bool:
        raise DTypeError("neg: not defined for bool tensors; use logical_not")
    return apply("neg", x)


def abs(x: Tensor) -> Tensor:  # noqa: A001  (PyTorch's name)
    """`|x|`. Example: `ember.tensor([-1.5]).abs()`."""
    if x.dtype.is_bool:
        raise DTypeError("abs: not defined for bool tensors")
    return apply("abs", x)


def sign(x: Tensor) -> Tensor:
    """-1, 0 or 1 by the sign of `x` (bool tensors are returned as they are)."""
    return x if x.dtype.is_bool else apply("sign", x)


def square(x: Tensor) -> Tensor:
    """`x * x`."""
    return mul(x, x)


def _rounding(name: str):
    def op(x: Tensor) -> Tensor:
        return x if not x.dtype.is_inexact else apply(name, x)  # complex: refused by the primitive

    op.__name__ = name
    op.__doc__ = f"Elementwise `{name}`; integer tensors are already whole and come back unchanged."
    return op


floor = _rounding("floor")
ceil = _rounding("ceil")
trunc = _rounding("trunc")
_round_half_even = _rounding("round")


def round(x: Tensor, decimals: int = 0) -> Tensor:  # noqa: A001
    """Round half to even, to `decimals` places. Example: `ember.tensor([2.5, 0.125]).round(2)`."""
    if decimals == 0:
        return _round_half_even(x)
    scale = 10.0 ** decimals
    return _round_half_even(x * scale) / scale


def frac(x: Tensor) -> Tensor:
    """The fractional part `x - trunc(x)`, with the sign of `x`."""
    return x - trunc(x)


# ---- binary ----------------------------------------------------------------------------------------

def _binary(name: str, a, b, float_only: bool = False) -> Tensor:
    x, y = promote(a, b, float_only=float_only)
    return bind(registry[name], (x, y), {})


def add(a, b) -> Tensor:
    """`a + b`. Example: `ember.add(x, 1)`."""
    return _binary("add", a, b)


def sub(a, b) -> Tensor:
    """`a - b`."""
    # PyTorch refuses a bool on either side, even when the other operand promotes the result.
    if any(isinstance(v, (bool, np.bool_)) or (isinstance(v, Tensor) and v.dtype.is_bool) for v in (a, b)):
        raise DTypeError("sub: not defined for bool operands; use logical_xor or ~")
    x, y = promote(a, b)
    return apply("sub", x, y)


def mul(a, b) -> Tensor:
    """`a * b`."""
    return _binary("mul", a, b)


def div(a, b, rounding_mode: str | None = None) -> Tensor:
    """`a / b`: true division (ints give floats); `rounding_mode="trunc"` or `"floor"` round the quotient.

    Integer quotients follow `floor_divide`: by 0 they are 0, and MIN by -1 is MIN.

    Example:
        >>> ember.div(ember.tensor([-7]), 2, rounding_mode="trunc").tolist()
        [-3]
    """
    if rounding_mode is None:
        return _binary("div", a, b, float_only=True)
    if rounding_mode == "floor":
        return floor_divide(a, b)
    if rounding_mode == "trunc":
        x, y = promote(a, b)
        if x.dtype.is_float:
            return _half_in_f32(lambda u, v: trunc(apply("div", u, v)))(x, y)
        q = floor_divide(x, y)
        return q + ((q < 0) & (q * y != x)).cast(q.dtype)
    raise ValueError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")


def _half_in_f32(fn):
    """Run a composed quotient op in f32 for f16/bf16 operands and round once (as PyTorch does):
    rounding the quotient to half precision before flooring can cross an integer."""
    def op(x: Tensor, y: Tensor, *rest) -> Tensor:
        if x.dtype.name in ("f16", "bf16"):
            return fn(x.cast("f32"), y.cast("f32"), *rest).cast(x.dtype)
        return fn(x, y, *rest)

    return op


def floor_divide(a, b) -> Tensor:
    """`a // b`: the quotient rounded toward minus infinity.

    On integers it is defined everywhere, on every device: `x // 0` is 0 (NumPy's result; PyTorch raises
    ZeroDivisionError on the CPU, which a device kernel cannot do cheaply) and `MIN // -1` is MIN (it
    wraps, as in PyTorch and NumPy). `remainder`, `fmod` and `div(rounding_mode=...)` follow it.

    Example:
        >>> (ember.tensor([7, -7, 7]) // ember.tensor([2, 2, 0])).tolist()
        [3, -4, 0]
    """
    x, y = promote(a, b)
    return _floor_divide(x, y)


@_half_in_f32
def _floor_divide(x: Tensor, y: Tensor) -> Tensor:
    if x.dtype.is_float:
        return floor(apply("div", x, y))
    return apply("floor_divide", x, y)


def remainder(a, b) -> Tensor:
    """`a % b` with the sign of `b` (Python's and PyTorch's `remainder`); on integers `x % 0` and
    `MIN % -1` are 0 (see `floor_divide`).

    Example:
        >>> (ember.tensor([-7, 7]) % ember.tensor([2, 0])).tolist()
        [1, 0]
    """
    return _binary("remainder", a, b)


def fmod(a, b) -> Tensor:
    """The C-style remainder, with the sign of `a`; on integers `fmod(x, 0)` and `fmod(MIN, -1)` are 0
    (see `floor_divide`).

    Example:
        >>> ember.fmod(ember.tensor([-7, 7]), ember.tensor([2, 0])).tolist()
        [-1, 0]
    """
    x, y = promote(a, b)
    if not x.dtype.is_float:  # from `remainder` (the sign of y), moved to the sign of x
        r = remainder(x, y)
        return r - y * ((r != 0) & ((r < 0) != (x < 0))).cast(x.dtype)
    return _half_in_f32(lambda u, v: u - div(u, v, rounding_mode="trunc") * v)(x, y)


@amp.float32
def pow(a, b) -> Tensor:  # noqa: A001
    """`a ** b`. Example: `ember.tensor([2.0]).pow(3)`."""
    if isinstance(a, Tensor) and not a.dtype.is_float and type(b) is int and b < 0:
        # checked before promotion: the exponent would wrap around in a u8 tensor's dtype
        raise ValueError("pow: integers to negative integer powers are not allowed")
    return _binary("pow", a, b)


def maximum(a, b) -> Tensor:
    """The elementwise larger of `a` and `b`."""
    return _binary("maximum", a, b)


def minimum(a, b) -> Tensor:
    """The elementwise smaller of `a` and `b`."""
    return _binary("minimum", a, b)


def atan2(a, b) -> Tensor:
    """The angle of the point (b, a), in (-pi, pi]."""
    return _binary("atan2", a, b, float_only=True)


def lerp(start, end, weight) -> Tensor:
    """`start + weight * (end - start)`; f16/bf16 are computed in f32 and rounded once, as in PyTorch
    (three roundings to f16 lose up to a percent where `end - start` cancels).

    Example:
        >>> ember.lerp(ember.tensor([0.0]), ember.tensor([10.0]), 0.25).tolist()
        [2.5]
    """
    narrow = start.dtype if isinstance(start, Tensor) and start.dtype in (f16, bf16) else None
    if narrow is None:
        return start + weight * (end - start)
    start, end, weight = (t.cast(f32) if isinstance(t, Tensor) else t for t in (start, end, weight))
    return (start + weight * (end - start)).cast(narrow)


def clamp(x: Tensor, min=None, max=None) -> Tensor:  # noqa: A002
    """`x` limited to [min, max] (either bound may be None, a scalar or a tensor).

    Example:
        >>> ember.tensor([-2.0, 0.5, 3.0]).clamp(-1, 1).tolist()
        [-1.0, 0.5, 1.0]
    """
    if min is None and max is None:
        raise ValueError("clamp: give at least one of min and max")
    # `where`, not maximum/minimum: at a bound the value and its gradient are x's, as in PyTorch
    # (maximum would split the gradient of a tie between x and the bound). NaN stays NaN.
    if min is not None:
        x = where(x < min, min, x)
    if max is not None:
        x = where(x > max, max, x)
    return x


def where(condition: Tensor, a, b) -> Tensor:
    """`a` where `condition` holds, else `b` (broadcast together; either may be a scalar).

    Example:
        >>> ember.where(ember.tensor([True, False]), 1.0, 0.0).tolist()
        [1.0, 0.0]
    """
    if not isinstance(condition, Tensor):
        raise TypeError("where: condition must be a bool tensor")
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = scalar_like(a, result_type(a, b), condition.device)
    x, y = promote(a, b)
    return apply("where", condition.cast(bool_), x, y)


def _where_method(x: Tensor, condition: Tensor, other) -> Tensor:
    """`x.where(condition, other)`: `x` where `condition` holds, else `other` (PyTorch's method form)."""
    return where(condition, x, other)


def masked_fill(x: Tensor, mask: Tensor, value) -> Tensor:
    """`x` with `value` wherever `mask` is true (the result keeps the dtype of `x`)."""
    return apply("where", mask.cast(bool_), to_tensor_like(value, x, x.dtype), x)


# ---- predicates --------------------------------------------------------------------------------------

def isnan(x: Tensor) -> Tensor:
    """True where `x` is NaN."""
    return apply("isnan", x) if x.dtype.is_inexact else x.new_full(x.shape, False).cast(bool_)


def isinf(x: Tensor) -> Tensor:
    """True where `x` is infinite."""
    return apply("isinf", x) if x.dtype.is_inexact else x.new_full(x.shape, False).cast(bool_)


def isfinite(x: Tensor) -> Tensor:
    """True where `x` is neither infinite nor NaN."""
    return logical_not(isnan(x) | isinf(x))


def nan_to_num(x: Tensor, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None) -> Tensor:
    """NaN, +inf and -inf replaced (by default with 0 and the dtype's largest and smallest values)."""
    if not x.dtype.is_float:
        return x
    import ml_dtypes  # np.finfo does not know bf16; loaded with bf16 anyway
    info = ml_dtypes.finfo(x.dtype.np)
    posinf = float(info.max) if posinf is None else posinf
    neginf = float(info.min) if neginf is None else neginf
    x = masked_fill(x, isnan(x), nan)
    x = masked_fill(x, isinf(x) & (x > 0), posinf)
    return masked_fill(x, isinf(x) & (x < 0), neginf)


# ---- comparison, logic, bits -------------------------------------------------------------------------

def _promoted(name: str, doc: str, to_bool: bool = False):
    """A binary op over promoted operands (cast to bool first for the logical ones)."""

    def op(a, b) -> Tensor:
        x, y = promote(a, b)
        if to_bool:
            x, y = x.cast(bool_), y.cast(bool_)
        return apply(name, x, y)

    op.__name__ = name
    op.__doc__ = doc.format(name=name)
    return op


_COMPARE = "Elementwise `{name}` comparison giving a bool tensor."
_LOGICAL = "Elementwise `{name}` of the truth values, giving a bool tensor."
_BITWISE = "Elementwise `{name}` of integer or bool tensors."
eq, ne, lt, le, gt, ge = (_promoted(n, _COMPARE) for n in ("eq", "ne", "lt", "le", "gt", "ge"))
logical_and, logical_or, logical_xor = (
    _promoted(n, _LOGICAL, to_bool=True) for n in ("logical_and", "logical_or", "logical_xor"))
bitwise_and, bitwise_or, bitwise_xor, bitwise_left_shift, bitwise_right_shift = (
    _promoted(n, _BITWISE) for n in ("bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"))


def logical_not(x: Tensor) -> Tensor:
    """True where `x` is zero or false."""
    return apply("logical_not", x.cast(bool_))


def bitwise_not(x: Tensor) -> Tensor:
    """Elementwise NOT of an integer tensor (logical NOT for bool)."""
    return apply("bitwise_not", x)


def _reflected(fn):
    return _operator(lambda x, other: fn(other, x))


_OPERANDS = (Tensor, bool, int, float, complex, np.number, np.bool_)


def _operator(fn):
    """An operator form: other operand types get NotImplemented, so Python can try their side."""
    def op(x, other):
        kind = type(other)
        if kind is not Tensor and kind is not float and kind is not int:  # the common operands pass at once
            if isinstance(other, np.ndarray):  # a NumPy array takes part as a tensor, as in PyTorch
                other = tensor(other, device=x._device.inner)
            elif not isinstance(other, _OPERANDS):
                return NotImplemented
        return fn(x, other)

    return op


METHODS = {
    **{n: globals()[n] for n in FLOAT_UNARY},
    "neg": neg, "abs": abs, "sign": sign, "square": square, "floor": floor, "ceil": ceil, "trunc": trunc,
    "round": round, "frac": frac, "add": add, "sub": sub, "mul": mul, "div": div,
    "floor_divide": floor_divide, "remainder": remainder, "fmod": fmod, "pow": pow, "maximum": maximum,
    "minimum": minimum, "atan2": atan2, "lerp": lerp, "clamp": clamp, "where": _where_method,
    "masked_fill": masked_fill, "isnan": isnan, "isinf": isinf, "isfinite": isfinite,
    "nan_to_num": nan_to_num, "eq": eq, "ne": ne, "lt": lt, "le": le, "gt": gt, "ge": ge,
    "logical_and": logical_and, "logical_or": logical_or, "logical_xor": logical_xor,
    "logical_not": logical_not, "bitwise_and": bitwise_and, "bitwise_or": bitwise_or,
    "bitwise_xor": bitwise_xor, "bitwise_not": bitwise_not, "bitwise_left_shift": bitwise_left_shift,
    "bitwise_right_shift": bitwise_right_shift,
    # operators
    "__add__": _operator(add), "__radd__": _reflected(add), "__sub__": _operator(sub), "__rsub__": _reflected(sub),
    "__mul__": _operator(mul), "__rmul__": _reflected(mul), "__truediv__": _operator(div), "__rtruediv__": _reflected(div),
    "__floordiv__": _operator(floor_divide), "__rfloordiv__": _reflected(floor_divide), "__mod__": _operator(remainder),
    "__rmod__": _reflected(remainder), "__pow__": _operator(pow), "__rpow__": _reflected(pow), "__neg__": neg,
    "__pos__": lambda x: x, "__abs__": abs, "__eq__": _operator(eq), "__ne__": _operator(ne),
    "__lt__": _operator(lt), "__le__": _operator(le), "__gt__": _operator(gt), "__ge__": _operator(ge),
    "__and__": _operator(bitwise_and), "__or__": _operator(bitwise_or), "__xor__": _operator(bitwise_xor),
    "__rand__": _reflected(bitwise_and), "__ror__": _reflected(bitwise_or),
    "__rxor__": _reflected(bitwise_xor), "__invert__": bitwise_not,
    "__lshift__": _operator(bitwise_left_shift), "__rshift__": _operator(bitwise_right_shift),
}


__all__ = sorted(n for n, f in METHODS.items() if not n.startswith("_") and callable(f) and n != "where") + [
    "where", "masked_fill"]
