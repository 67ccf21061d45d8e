"""Elementwise primitives: unary math, binary arithmetic and comparison, `where`, and `cast`.

Each op is one row: its name, its NumPy reference and its gradient rule. Inputs of a binary op arrive
already broadcast-compatible and of one dtype (the tensor layer promotes with PyTorch's rules first), so
the shape rule is broadcasting and the dtype rule is "same as the inputs", or bool for comparisons.

Half-precision references compute in f32 and round once, as PyTorch does on the CPU.

Example:
    >>> registry["add"].infer(Aval((2, 1), f32), Aval((3,), f32))
    Aval(shape=(2, 3), dtype=f32)
"""

from __future__ import annotations

import math

import numpy as np

from ..dtype import HALF_NP, DType, bool_, float_to_int
from ..errors import DTypeError
from .primitive import (Aval, broadcast_shapes, check_size, primitive, same_aval, saves_inputs, saves_inputs_at,
                        saves_none, saves_output, saves_partners)
from .grad_utils import sum_to

LN2 = math.log(2.0)
LN10 = math.log(10.0)
SQRT1_2 = math.sqrt(0.5)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _upcast(fn):
    """Run `fn` in f32 for f16/bf16 inputs and round the result back, as PyTorch's CPU kernels do.

    Elementwise primitives take no params, so the wrapper takes positional arrays only: this is the
    hottest path of the NumPy backend.
    """

    def compute(*arrays):
        dt = arrays[0].dtype
        if dt in HALF_NP:
            return np.asarray(fn(*(a.astype(np.float32) for a in arrays))).astype(dt)
        return fn(*arrays)

    return compute


# ---- unary ---------------------------------------------------------------------------------------

def _float_only(name: str):
    def infer(x: Aval) -> Aval:
        if not x.dtype.is_float:
            raise DTypeError(f"{name}: expects a float tensor, got {x.dtype}")
        return x

    return infer


def _bool_out(x: Aval) -> Aval:
    return Aval(x.shape, bool_)


_erf_scalar = np.frompyfunc(math.erf, 1, 1)


def _erf(x):
    # NumPy has no erf; math.erf is exact to f64. A reference backend values exactness over speed.
    # A ufunc from frompyfunc returns a Python float, not an array, for a 0-d input.
    return np.asarray(_erf_scalar(x)).astype(x.dtype)


def _erfinv(y):
    # Giles' single-precision start, then Newton steps on erf: exact to f64 after two steps.
    w = -np.log((1.0 - y) * (1.0 + y))
    small = w < 5.0
    ws = w - 2.5
    wl = np.sqrt(np.where(small, 5.0, w)) - 3.0
    p_small = 2.81022636e-08
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
              -0.00417768164, 0.246640727, 1.50140941):
        p_small = c + p_small * ws
    p_large = -0.000200214257
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
              0.00943887047, 1.00167406, 2.83297682):
        p_large = c + p_large * wl
    x = np.where(small, p_small, p_large) * y
    for _ in range(2):
        err = _erf(x) - y
        x = x - err / (2.0 / math.sqrt(math.pi) * np.exp(-x * x))
    x = np.where(np.abs(y) == 1, np.copysign(np.inf, y), x)
    return np.where(np.abs(y) > 1, np.nan, x).astype(y.dtype)


def _zeros(ctx, g):
    return (g.zeros_like(),)


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x * SQRT1_2))


def _gelu_vjp(ctx, g):
    # d/dx x Phi(x) = Phi(x) + x phi(x): one fused kernel from the kept input (PyTorch's formula)
    x = ctx.inputs[0]
    return g * ((x * SQRT1_2).erf() * 0.5 + 0.5 + x * (x * x * -0.5).exp() * INV_SQRT_2PI)


# name: (reference, vjp(ctx, g) -> input cotangent, float-only?)
UNARY = {
    "neg": (np.negative, lambda c, g: -g, False),
    "abs": (np.abs, lambda c, g: g * c.inputs[0].sign(), False),
    "sign": (lambda x: np.where(np.isnan(x), 0, np.sign(x)).astype(x.dtype) if x.dtype.kind in "fV" else np.sign(x),
             _zeros, False),  # PyTorch's sign(NaN) is 0
    "reciprocal": (np.reciprocal, lambda c, g: -g * c.output * c.output, True),
    "exp": (np.exp, lambda c, g: g * c.output, True),
    "exp2": (np.exp2, lambda c, g: g * c.output * LN2, True),
    "expm1": (np.expm1, lambda c, g: g * (c.output + 1), True),
    "log": (np.log, lambda c, g: g / c.inputs[0], True),
    "log2": (np.log2, lambda c, g: g / (c.inputs[0] * LN2), True),
    "log10": (np.log10, lambda c, g: g / (c.inputs[0] * LN10), True),
    "log1p": (np.log1p, lambda c, g: g / (c.inputs[0] + 1), True),
    "sqrt": (np.sqrt, lambda c, g: g / (c.output * 2), True),
    "rsqrt": (lambda x: 1 / np.sqrt(x), lambda c, g: g * c.output ** 3 * -0.5, True),
    "sin": (np.sin, lambda c, g: g * c.inputs[0].cos(), True),
    "cos": (np.cos, lambda c, g: -g * c.inputs[0].sin(), True),
    "tan": (np.tan, lambda c, g: g * (c.output * c.output + 1), True),
    "asin": (np.arcsin, lambda c, g: g * (1 - c.inputs[0] ** 2).rsqrt(), True),
    "acos": (np.arccos, lambda c, g: -g * (1 - c.inputs[0] ** 2).rsqrt(), True),
    "atan": (np.arctan, lambda c, g: g / (c.inputs[0] ** 2 + 1), True),
    "sinh": (np.sinh, lambda c, g: g * c.inputs[0].cosh(), True),
    "cosh": (np.cosh, lambda c, g: g * c.inputs[0].sinh(), True),
    "tanh": (np.tanh, lambda c, g: g * (1 - c.output * c.output), True),
    "asinh": (np.arcsinh, lambda c, g: g * (c.inputs[0] ** 2 + 1).rsqrt(), True),
    "acosh": (np.arccosh, lambda c, g: g * (c.inputs[0] ** 2 - 1).rsqrt(), True),
    "atanh": (np.arctanh, lambda c, g: g / (1 - c.inputs[0] ** 2), True),
    "erf": (_erf, lambda c, g: g * (-(c.inputs[0] ** 2)).exp() * (2 / math.sqrt(math.pi)), True),
    "erfinv": (_erfinv, lambda c, g: g * (c.output ** 2).exp() * (math.sqrt(math.pi) / 2), True),
    "sigmoid": (lambda x: 0.5 * (np.tanh(0.5 * x) + 1), lambda c, g: g * c.output * (1 - c.output), True),
    "gelu": (_gelu, _gelu_vjp, True),  # exact (erf) GELU: one op keeps x only, its composition four values
    "floor": (np.floor, _zeros, True),
    "ceil": (np.ceil, _zeros, True),
    "round": (np.round, _zeros, True),
    "trunc": (np.trunc, _zeros, True),
}


# What each rule above reads (`Primitive.saves`): the output, nothing, or (the others) the input.
_READS_OUTPUT = {"reciprocal", "exp", "exp2", "expm1", "sqrt", "rsqrt", "tan", "tanh", "erfinv", "sigmoid"}
_READS_NOTHING = {"neg", "sign", "floor", "ceil", "round", "trunc"}


def _unary_vjp(rule):
    if rule is None or rule is _zeros:
        return rule
    return lambda ctx, g: (rule(ctx, g),)


for _name, (_ref, _rule, _float) in UNARY.items():
    primitive(
        _name,
        infer=_float_only(_name) if _float else same_aval,
        vjp=_unary_vjp(_rule),
        saves=saves_output if _name in _READS_OUTPUT else saves_none if _name in _READS_NOTHING else saves_inputs,
    )(_upcast(_ref))

# Predicates and bit ops: no gradient.
primitive("isnan", infer=_bool_out)(lambda x: np.isnan(x.astype(np.float32) if x.dtype.itemsize == 2 else x))
primitive("isinf", infer=_bool_out)(lambda x: np.isinf(x.astype(np.float32) if x.dtype.itemsize == 2 else x))
primitive("logical_not", infer=_bool_out)(np.logical_not)


def _int_or_bool(name: str):
    def infer(x: Aval, *rest: Aval) -> Aval:
        shape = broadcast_shapes(name, x.shape, *(r.shape for r in rest)) if rest else x.shape
        if x.dtype.is_float:
            raise DTypeError(f"{name}: expects integer or bool tensors, got {x.dtype}")
        check_size(name, shape, x.dtype)
        return Aval(shape, x.dtype)

    return infer


primitive("bitwise_not", infer=_int_or_bool("bitwise_not"))(np.invert)


# ---- binary --------------------------------------------------------------------------------------

def _binary_infer(name: str, out_dtype: DType | None = None, allow_bool: bool = True):
    seen: dict[tuple, Aval] = {}  # (a, b) -> result: avals are immutable, and a loop meets the same few

    def infer(a: Aval, b: Aval) -> Aval:
        hit = seen.get((a, b))
        if hit is not None:
            return hit
        if a.dtype is not b.dtype:
            raise DTypeError(f"{name}: operands must share a dtype after promotion, got {a.dtype} and {b.dtype}")
        if not allow_bool and a.dtype.is_bool:
            raise DTypeError(f"{name}: not defined for bool tensors")
        if out_dtype is None and a.shape == b.shape:
            out = a
        else:
            out = Aval(broadcast_shapes(name, a.shape, b.shape), out_dtype or a.dtype)
            check_size(name, out.shape, out.dtype)
        if len(seen) >= 1024:
            seen.clear()
        seen[(a, b)] = out
        return out

    return infer


def _binary_vjp(rule):
    def vjp(ctx, g):
        ga, gb = rule(ctx, g)
        (sa, _), (sb, _) = ctx.input_avals
        # A constant operand (`x * 0.5`'s scalar) gets no cotangent: no ops dispatched for it.
        return (sum_to(ga, sa) if ga is not None and ctx.needs_grad(0) else None,
                sum_to(gb, sb) if gb is not None and ctx.needs_grad(1) else None)

    return vjp


def _sides(rule_a, rule_b):
    """A binary rule from one rule per operand, each run only when its operand needs a gradient."""
    return lambda c, g: (rule_a(c, g) if c.needs_grad(0) else None, rule_b(c, g) if c.needs_grad(1) else None)


def _div_vjp(ctx, g):
    q = g / ctx.input(1)  # a / b: da = g / b, db = -g * a / b**2 = -(g / b) * out
    return (q if ctx.needs_grad(0) else None, -q * ctx.output if ctx.needs_grad(1) else None)


def _pow_vjp(ctx, g):
    a, b = ctx.inputs
    # 0 ** -1 is inf; PyTorch's gradient is 0 there
    ga = (g * b * a ** (b - 1)).masked_fill(b == 0, 0) if ctx.needs_grad(0) else None
    gb = g * (ctx.output * a.log()).masked_fill((a == 0) & (b >= 0), 0) if ctx.needs_grad(1) else None
    return ga, gb


def _extreme_vjp(pick):
    # PyTorch splits the gradient evenly between equal operands.
    def rule(ctx, g):
        a, b = ctx.inputs
        ga = (g / 2).where(a == b, g.masked_fill(pick(b, a), 0))
        return ga, g - ga

    return rule


def _atan2_vjp(ctx, g):
    a, b = ctx.inputs
    denom = a * a + b * b
    return (g * b / denom if ctx.needs_grad(0) else None, -g * a / denom if ctx.needs_grad(1) else None)


def _quiet(fn):
    """`fn` without NumPy's warnings for integer division by 0 (0, as on every device) and MIN by -1 (MIN)."""
    def compute(a, b):
        if a.dtype.kind in "iu":
            with np.errstate(divide="ignore", over="ignore"):
                return fn(a, b)
        return fn(a, b)

    return compute


BINARY = {
    "add": (np.add, lambda c, g: (g, g)),
    "sub": (np.subtract, _sides(lambda c, g: g, lambda c, g: -g)),
    "mul": (np.multiply, _sides(lambda c, g: g * c.input(1), lambda c, g: g * c.input(0))),
    "div": (np.true_divide, _div_vjp),
    "pow": (np.power, _pow_vjp),
    "maximum": (np.maximum, _extreme_vjp(lambda b, a: a < b)),
    "minimum": (np.minimum, _extreme_vjp(lambda b, a: a > b)),
    "atan2": (np.arctan2, _atan2_vjp),
    "remainder": (_quiet(np.remainder), _sides(lambda c, g: g, lambda c, g: -g * (c.inputs[0] / c.inputs[1]).floor())),
    "floor_divide": (_quiet(np.floor_divide), None),
}


def _div_saves(tracked: tuple[bool, bool]) -> tuple[tuple[int, ...], bool]:
    return (1,), tracked[1]  # the divisor; the output for the divisor's own gradient only


# What each rule above reads (`Primitive.saves`; pow's reads everything: the default). Each side of mul
# reads the other only, so `x * c` keeps c, not x.
_BINARY_SAVES = {"add": saves_none, "sub": saves_none, "mul": saves_partners, "div": _div_saves,
                 "maximum": saves_inputs, "minimum": saves_inputs, "atan2": saves_inputs, "remainder": saves_inputs}

for _name, (_ref, _rule) in BINARY.items():
    primitive(
        _name,
        infer=_binary_infer(_name, allow_bool=_name in ("add", "mul", "maximum", "minimum")),
        vjp=_binary_vjp(_rule) if _rule else None,
        saves=_BINARY_SAVES.get(_name),
    )(_upcast(_ref))


for _name, _ref in {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                    "gt": np.greater, "ge": np.greater_equal, "logical_and": np.logical_and,
                    "logical_or": np.logical_or, "logical_xor": np.logical_xor}.items():
    primitive(_name, infer=_binary_infer(_name, bool_))(_ref)

for _name, _ref in {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
                    "bitwise_xor": np.bitwise_xor, "left_shift": np.left_shift,
                    "right_shift": np.right_shift}.items():
    primitive(_name, infer=_int_or_bool(_name))(_ref)


# ---- where and cast ------------------------------------------------------------------------------

def _where_infer(c: Aval, a: Aval, b: Aval) -> Aval:
    if not c.dtype.is_bool:
        raise DTypeError(f"where: condition must be bool, got {c.dtype}")
    if a.dtype is not b.dtype:
        raise DTypeError(f"where: branches must share a dtype after promotion, got {a.dtype} and {b.dtype}")
    shape = broadcast_shapes("where", c.shape, a.shape, b.shape)
    check_size("where", shape, a.dtype)
    return Aval(shape, a.dtype)


def _where_vjp(ctx, g):
    from ..api.math import where
    c = ctx.input(0)
    _, (sa, _), (sb, _) = ctx.input_avals
    # A constant branch (relu's and masked_fill's fill value) needs no gradient: skip its select. The
    # other side selects against a scalar 0, which fuses; a zeros_like would be a fill run at once.
    ga = sum_to(where(c, g, 0), sa) if ctx.needs_grad(1) else None
    gb = sum_to(where(c, 0, g), sb) if ctx.needs_grad(2) else None
    return None, ga, gb


primitive("where", infer=_where_infer, vjp=_where_vjp, saves=saves_inputs_at(0))(lambda c, a, b: np.where(c, a, b))


def _cast_infer(x: Aval, *, dtype: DType) -> Aval:
    return Aval(x.shape, dtype)


def _cast_vjp(ctx, g):
    (_, src), = ctx.input_avals
    return (g.cast(src) if src.is_float else None,)


def _cast_reference(x, *, dtype: DType):
    if dtype.is_bool:
        return x != 0
    if dtype.is_int and x.dtype.kind in "fV":
        return float_to_int(x, dtype)  # NaN and out of range defined, as on every device
    return x.astype(dtype.np)


primitive("cast", infer=_cast_infer, vjp=_cast_vjp, saves=saves_none)(_cast_reference)
