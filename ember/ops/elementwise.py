"""Elementwise primitives: unary math, binary arithmetic and comparison, `where`, and `cast`.

`TABLE` is the single source for an elementwise op: one `Elementwise` row per primitive (its name,
NumPy reference, gradient rule, what it saves, float-only, bool-out, and its cube expression), made
and registered by one `unary(...)` or `binary(...)` call. Everything else is derived from it: the API's
float-only list (`ember.api.math`), the kernel generator (`ember.kernels.elementwise`), the Cube
backend's lowering rows and the fusion backend's emitters. The table lives here, below the API and the
backends, so imports point down: the cube expressions are written in the `ember.cube` language, which
knows nothing of primitives, and `ember.kernels` imports the table. A new elementwise primitive is
one call here (see docs/architecture.md).

Inputs of a binary op arrive already broadcast-compatible and of one dtype (the tensor layer promotes
with PyTorch's rules first), so the shape rule is broadcasting and the dtype rule is "same as the
inputs", or bool for comparisons. Half-precision references compute in f32 and round once, as PyTorch
does on the CPU.

Example:
    >>> registry["add"].infer(Aval((2, 1), f32), Aval((3,), f32))
    Aval(shape=(2, 3), dtype=f32)
    >>> TABLE["exp"].kernel, TABLE["exp"].float_only
    (cube.exp, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .. import cube
from ..dtype import COMPLEX, HALF_NP, DType, bool_, float_to_int, real_of
from ..errors import DTypeError
from ..limits import check_size
from .primitive import (Aval, broadcast_shapes, primitive, same_aval, saves_inputs, saves_inputs_at,
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


# ---- the table ---------------------------------------------------------------------------------------

def _floats(dtype: DType) -> bool:
    return dtype.is_float


def _not_bool(dtype: DType) -> bool:
    return not dtype.is_bool


@dataclass(frozen=True)
class Elementwise:
    """One elementwise primitive, the single place that says what it is.

    `reference` is its NumPy reference and `kernel` its cube expression: an `ember.cube` intrinsic
    or a `@cube.function` of the operands' kernel values (inputs of one dtype), giving the output's
    value. `vjp` and `saves` are the primitive's gradient rule and what it keeps (`Primitive.saves`;
    None: everything). `float_only`: the primitive refuses other dtypes (a `DTypeError` at the call);
    `promotes`: the API turns int and bool tensors into the default float first (PyTorch's exp, ...).
    `bool_out`: the result is bool. `lowers(dtype)`: whether `kernel` computes inputs of `dtype`
    (others run the reference on the Cube backend and are not fused; None: every dtype, see
    `computes`; complex dtypes never: the kernels hold them as float pairs, docs/complex.md). `arity` is
    1 or 2.
    """

    name: str
    arity: int
    reference: Callable
    kernel: Any
    vjp: Callable | None = None
    saves: Callable | None = saves_none
    float_only: bool = False
    promotes: bool = False
    bool_out: bool = False
    lowers: Callable[[DType], bool] | None = None
    infer: Callable | None = None

    def computes(self, dtype: DType) -> bool:
        """Whether the cube expression computes inputs of `dtype`."""
        return dtype.category != COMPLEX and (self.lowers is None or self.lowers(dtype))


TABLE: dict[str, Elementwise] = {}
"""Every elementwise primitive's row, by name."""


def _row(name: str, arity: int, reference: Callable, kernel, *, upcast: bool = True, complex_rule: bool = False,
         **fields) -> None:
    row = TABLE[name] = Elementwise(name, arity, reference, kernel, **fields)
    primitive(name, infer=row.infer, vjp=row.vjp, saves=row.saves, complex_rule=complex_rule)(
        _upcast(reference) if upcast else reference)


COMPLEX_UNARY = frozenset(("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal",
                           "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh",
                           "atanh", "sigmoid"))
"""The float-only unary ops that also take complex tensors (PyTorch's; their rules are holomorphic)."""


def unary(name: str, reference: Callable, kernel, vjp=None, saves=saves_inputs, float_only: bool = True,
          **fields) -> None:
    """Register unary primitive `name` and its row; float-only and promoting by default (exp, sin, ...)."""
    infer = _float_only(name, name in COMPLEX_UNARY) if float_only else same_aval
    _row(name, 1, reference, kernel, vjp=_unary_vjp(vjp), saves=saves if vjp not in (None, _zeros) else saves_none,
         float_only=float_only, promotes=fields.pop("promotes", float_only), infer=fields.pop("infer", infer), **fields)


def binary(name: str, reference: Callable, kernel, vjp=None, saves=None, allow_bool: bool = False, **fields) -> None:
    """Register binary primitive `name` and its row (operands of one dtype, broadcast)."""
    out = bool_ if fields.get("bool_out") else None
    infer = fields.pop("infer", None) or _binary_infer(name, out, allow_bool)
    _row(name, 2, reference, kernel, vjp=_binary_vjp(vjp) if vjp else None, saves=saves, infer=infer, **fields)


# ---- unary ---------------------------------------------------------------------------------------

def _float_only(name: str, complex_ok: bool = False):
    def infer(x: Aval) -> Aval:
        if not (x.dtype.is_float or complex_ok and x.dtype.is_complex):
            raise DTypeError(f"{name}: expects a float{' or complex' if complex_ok else ''} tensor, got {x.dtype}")
        return x

    return infer


def _bool_out(x: Aval) -> Aval:
    return Aval(x.shape, bool_)


_erf_scalar = np.frompyfunc(math.erf, 1, 1)


def _erf(x):
    # NumPy has no erf; math.erf is exact to f64. A reference backend values exactness over speed.
    # A ufunc from frompyfunc returns a Python float, not an array, for a 0-d input.
    return np.asarray(_erf_scalar(x)).astype(x.dtype)


# Giles' polynomials (start, coefficients), for w < 5 and above
_ERFINV_SMALL = (2.81022636e-08, (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                                  -0.00417768164, 0.246640727, 1.50140941))
_ERFINV_LARGE = (-0.000200214257, (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                                   0.00943887047, 1.00167406, 2.83297682))


def _erfinv(y):
    # Giles' single-precision start, then Newton steps on erf: exact to f64 after two steps.
    w = -np.log((1.0 - y) * (1.0 + y))
    small = w < 5.0
    ws = w - 2.5
    wl = np.sqrt(np.where(small, 5.0, w)) - 3.0
    p_small = _ERFINV_SMALL[0]
    for c in _ERFINV_SMALL[1]:
        p_small = c + p_small * ws
    p_large = _ERFINV_LARGE[0]
    for c in _ERFINV_LARGE[1]:
        p_large = c + p_large * wl
    x = np.where(small, p_small, p_large) * y
    for _ in range(2):
        err = _erf(x) - y
        x = x - err / (2.0 / math.sqrt(math.pi) * np.exp(-x * x))
    x = np.where(np.abs(y) == 1, np.copysign(np.inf, y), x)
    return np.where(np.abs(y) > 1, np.nan, x).astype(y.dtype)


@cube.function
def _erfinv_kernel(y):
    """The reference's method in the kernel: one Newton pass less precise than f64, as exact as f32."""
    t = y.dtype
    w = -cube.log((t(1) - y) * (t(1) + y))
    ws = w - t(2.5)
    wl = cube.sqrt(cube.select(w < t(5), t(5), w)) - t(3)
    small = t(_ERFINV_SMALL[0])
    for c in cube.unroll(_ERFINV_SMALL[1]):
        small = t(c) + small * ws
    large = t(_ERFINV_LARGE[0])
    for c in cube.unroll(_ERFINV_LARGE[1]):
        large = t(c) + large * wl
    x = cube.select(w < t(5), small, large) * y
    for _ in cube.unroll(range(2)):
        x = x - (cube.erf(x) - y) / (t(1.1283791670955126) * cube.exp(-x * x))
    edge = cube.select(y > t(0), t(float("inf")), t(float("-inf")))
    return cube.select(cube.abs(y) == t(1), edge, x)


def _zeros(ctx, g):
    return (g.zeros_like(),)


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x * SQRT1_2))


def _gelu_vjp(ctx, g):
    # d/dx x Phi(x) = Phi(x) + x phi(x): one fused kernel from the kept input (PyTorch's formula)
    x = ctx.inputs[0]
    return g * ((x * SQRT1_2).erf() * 0.5 + 0.5 + x * (x * x * -0.5).exp() * INV_SQRT_2PI)


def _unary_vjp(rule):
    if rule is None or rule is _zeros:
        return rule
    return lambda ctx, g: (rule(ctx, g),)


@cube.function
def _neg_kernel(x):
    return -x


@cube.function
def _abs_kernel(x):
    return x if x.dtype == cube.bool_ else cube.abs(x)


@cube.function
def _sign_kernel(x):
    t = x.dtype
    if t == cube.bool_ or t == cube.u8:  # no -1 to build: sign is x != 0
        return cube.cast(x != t(0), t)
    return cube.select(x > t(0), t(1), cube.select(x < t(0), t(-1), t(0)))


@cube.function
def _sigmoid_kernel(x):
    t = x.dtype
    return t(1) / (t(1) + cube.exp(-x))


@cube.function
def _gelu_kernel(x):
    t = x.dtype
    return t(0.5) * x * (t(1) + cube.erf(x * t(SQRT1_2)))


@cube.function
def _isnan_kernel(x):
    return x != x  # NaN is the one value != itself (never, for ints)


@cube.function
def _isinf_kernel(x):
    if x.dtype.is_float:
        return cube.abs(x) == x.dtype(float("inf"))
    return x != x


@cube.function
def _logical_not_kernel(x):
    return not x


@cube.function
def _bitwise_not_kernel(x):
    return ~x


def _abs_infer(x: Aval) -> Aval:
    return Aval(x.shape, real_of(x.dtype)) if x.dtype.category == COMPLEX else x


def _abs_vjp(ctx, g):
    x = ctx.inputs[0]
    if not x.dtype.is_complex:
        return g * x.sign()
    # d|z| in PyTorch's convention: g z / |z|, and 0 at z = 0 (torch's sgn)
    size = x.abs()
    return g.cast(x.dtype) * (x / size.masked_fill(size == 0, 1).cast(x.dtype))


def _real_only(name: str):
    def infer(x: Aval) -> Aval:
        if x.dtype.category == COMPLEX:
            raise DTypeError(f"{name}: not defined for complex tensors ({x.dtype})")
        return x

    return infer


def _sign(x):
    return np.where(np.isnan(x), 0, np.sign(x)).astype(x.dtype) if x.dtype.kind in "fV" else np.sign(x)


def _predicate(fn):
    return lambda x: fn(x.astype(np.float32) if x.dtype.itemsize == 2 else x)


unary("neg", np.negative, _neg_kernel, lambda c, g: -g, saves_none, float_only=False)
unary("abs", np.abs, _abs_kernel, _abs_vjp, float_only=False, infer=_abs_infer, complex_rule=True)
unary("sign", _sign, _sign_kernel, _zeros, float_only=False, infer=_real_only("sign"))  # PyTorch's sign(NaN) is 0
unary("reciprocal", np.reciprocal, cube.reciprocal, lambda c, g: -g * c.output * c.output, saves_output)
unary("exp", np.exp, cube.exp, lambda c, g: g * c.output, saves_output)
unary("exp2", np.exp2, cube.exp2, lambda c, g: g * c.output * LN2, saves_output)
unary("expm1", np.expm1, cube.expm1, lambda c, g: g * (c.output + 1), saves_output)
unary("log", np.log, cube.log, lambda c, g: g / c.inputs[0])
unary("log2", np.log2, cube.log2, lambda c, g: g / (c.inputs[0] * LN2))
unary("log10", np.log10, cube.log10, lambda c, g: g / (c.inputs[0] * LN10))
unary("log1p", np.log1p, cube.log1p, lambda c, g: g / (c.inputs[0] + 1))
unary("sqrt", np.sqrt, cube.sqrt, lambda c, g: g / (c.output * 2), saves_output)
unary("rsqrt", lambda x: 1 / np.sqrt(x), cube.rsqrt, lambda c, g: g * c.output ** 3 * -0.5, saves_output)
unary("sin", np.sin, cube.sin, lambda c, g: g * c.inputs[0].cos())
unary("cos", np.cos, cube.cos, lambda c, g: -g * c.inputs[0].sin())
unary("tan", np.tan, cube.tan, lambda c, g: g * (c.output * c.output + 1), saves_output)
unary("asin", np.arcsin, cube.asin, lambda c, g: g * (1 - c.inputs[0] ** 2).rsqrt())
unary("acos", np.arccos, cube.acos, lambda c, g: -g * (1 - c.inputs[0] ** 2).rsqrt())
unary("atan", np.arctan, cube.atan, lambda c, g: g / (c.inputs[0] ** 2 + 1))
unary("sinh", np.sinh, cube.sinh, lambda c, g: g * c.inputs[0].cosh())
unary("cosh", np.cosh, cube.cosh, lambda c, g: g * c.inputs[0].sinh())
unary("tanh", np.tanh, cube.tanh, lambda c, g: g * (1 - c.output * c.output), saves_output)
unary("asinh", np.arcsinh, cube.asinh, lambda c, g: g * (c.inputs[0] ** 2 + 1).rsqrt())
unary("acosh", np.arccosh, cube.acosh, lambda c, g: g * (c.inputs[0] ** 2 - 1).rsqrt())
unary("atanh", np.arctanh, cube.atanh, lambda c, g: g / (1 - c.inputs[0] ** 2))
unary("erf", _erf, cube.erf, lambda c, g: g * (-(c.inputs[0] ** 2)).exp() * (2 / math.sqrt(math.pi)))
unary("erfinv", _erfinv, _erfinv_kernel, lambda c, g: g * (c.output ** 2).exp() * (math.sqrt(math.pi) / 2),
      saves_output)
unary("sigmoid", lambda x: 0.5 * (np.tanh(0.5 * x) + 1), _sigmoid_kernel, lambda c, g: g * c.output * (1 - c.output),
      saves_output)
unary("gelu", _gelu, _gelu_kernel, _gelu_vjp, promotes=False)  # exact (erf) GELU: one op keeps x only, its composition four values
unary("floor", np.floor, cube.floor, _zeros, promotes=False)  # ints: the API returns them
unary("ceil", np.ceil, cube.ceil, _zeros, promotes=False)  # ints: the API returns them
unary("round", np.round, cube.round, _zeros, promotes=False)  # ints: the API returns them
unary("trunc", np.trunc, cube.trunc, _zeros, promotes=False)  # ints: the API returns them
# Predicates and bit ops: no gradient.
unary("isnan", _predicate(np.isnan), _isnan_kernel, float_only=False, bool_out=True, infer=_bool_out, upcast=False)
unary("isinf", _predicate(np.isinf), _isinf_kernel, float_only=False, bool_out=True, infer=_bool_out, upcast=False)
unary("logical_not", np.logical_not, _logical_not_kernel, float_only=False, bool_out=True, infer=_bool_out,
      upcast=False)


def _int_or_bool(name: str):
    def infer(x: Aval, *rest: Aval) -> Aval:
        shape = broadcast_shapes(name, x.shape, *(r.shape for r in rest)) if rest else x.shape
        if x.dtype.is_inexact:
            raise DTypeError(f"{name}: expects integer or bool tensors, got {x.dtype}")
        check_size(name, shape, x.dtype)
        return Aval(shape, x.dtype)

    return infer


unary("bitwise_not", np.invert, _bitwise_not_kernel, float_only=False, infer=_int_or_bool("bitwise_not"),
      upcast=False)


# ---- binary --------------------------------------------------------------------------------------

COMPLEX_BINARY = frozenset(("add", "sub", "mul", "div", "pow", "eq", "ne", "logical_and", "logical_or",
                            "logical_xor"))
"""The binary ops that take complex operands (PyTorch's); the others refuse them."""


def _binary_infer(name: str, out_dtype: DType | None = None, allow_bool: bool = True):
    complex_ok = name in COMPLEX_BINARY

    seen: dict[tuple, Aval] = {}  # (a, b) -> result: avals are immutable, and a loop meets the same few

    def infer(a: Aval, b: Aval) -> Aval:
        hit = seen.get((a, b))
        if hit is not None:
            return hit
        if a.dtype is not b.dtype:
            raise DTypeError(f"{name}: operands must share a dtype after promotion, got {a.dtype} and {b.dtype}")
        if not allow_bool and a.dtype.is_bool:
            raise DTypeError(f"{name}: not defined for bool tensors")
        if not complex_ok and a.dtype.category == COMPLEX:
            raise DTypeError(f"{name}: not defined for complex tensors ({a.dtype})")
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
    if a.dtype.is_complex:  # (the conjugates are taken around this rule: ember.ops.primitive)
        ga = g * b * a ** (b - 1) if ctx.needs_grad(0) else None
        gb = g * (ctx.output * a.log()).masked_fill(a == 0, 0) if ctx.needs_grad(1) else None
        return ga, gb
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


def _div_saves(tracked: tuple[bool, bool]) -> tuple[tuple[int, ...], bool]:
    return (1,), tracked[1]  # the divisor; the output for the divisor's own gradient only


@cube.function
def _add_kernel(a, b):
    return (a or b) if a.dtype == cube.bool_ else a + b


@cube.function
def _sub_kernel(a, b):
    return a - b


@cube.function
def _mul_kernel(a, b):
    return (a and b) if a.dtype == cube.bool_ else a * b


@cube.function
def _div_kernel(a, b):
    return a / b


@cube.function
def _nan_wins(a, b, best):
    """`best` of a and b, or the NaN among them (NumPy's maximum and minimum)."""
    if a.dtype.is_float:
        return cube.select(a != a, a, cube.select(b != b, b, best))
    return best


@cube.function
def maximum_kernel(a, b):
    """NumPy's maximum of kernel values: NaN wins; `or` on bools."""
    if a.dtype == cube.bool_:
        return a or b
    return _nan_wins(a, b, cube.max(a, b))


@cube.function
def _minimum_kernel(a, b):
    if a.dtype == cube.bool_:
        return a and b
    return _nan_wins(a, b, cube.min(a, b))


@cube.function
def _remainder_kernel(a, b):
    t = a.dtype
    r = a % b  # the IR's rem truncates (fmod for floats; 0 by 0 and by -1 for ints): moved to b's sign
    if t.is_float:
        return cube.select((r != t(0)) and ((r < t(0)) != (b < t(0))), r + b, r)
    # arithmetic on the condition: gcc may make a select a branch, which mispredicts on mixed signs
    return r + b * cube.cast((r != t(0)) and ((r < t(0)) != (b < t(0))), t)


@cube.function
def _floor_divide_kernel(a, b):
    t = a.dtype
    if t.is_float:
        return cube.floor(a / b)
    q = a // b  # truncates (0 by 0, MIN by -1 is MIN); one down when the signs differ and it is inexact
    return q - cube.cast((a % b != t(0)) and ((a < t(0)) != (b < t(0))), t)


binary("add", np.add, _add_kernel, lambda c, g: (g, g), saves_none, allow_bool=True)
binary("sub", np.subtract, _sub_kernel, _sides(lambda c, g: g, lambda c, g: -g), saves_none)
# Each side of mul reads the other only, so `x * c` keeps c, not x.
binary("mul", np.multiply, _mul_kernel, _sides(lambda c, g: g * c.input(1), lambda c, g: g * c.input(0)),
       saves_partners, allow_bool=True)
binary("div", np.true_divide, _div_kernel, _div_vjp, _div_saves, lowers=_floats)
binary("pow", np.power, cube.pow, _pow_vjp, lowers=_floats)
binary("maximum", np.maximum, maximum_kernel, _extreme_vjp(lambda b, a: a < b), saves_inputs, allow_bool=True)
binary("minimum", np.minimum, _minimum_kernel, _extreme_vjp(lambda b, a: a > b), saves_inputs, allow_bool=True)
binary("atan2", np.arctan2, cube.atan2, _atan2_vjp, saves_inputs, lowers=_floats)
binary("remainder", _quiet(np.remainder), _remainder_kernel,
       _sides(lambda c, g: g, lambda c, g: -g * (c.inputs[0] / c.inputs[1]).floor()), saves_inputs)
binary("floor_divide", _quiet(np.floor_divide), _floor_divide_kernel)


@cube.function
def _eq_kernel(a, b):
    return a == b


@cube.function
def _ne_kernel(a, b):
    return a != b


@cube.function
def _lt_kernel(a, b):
    return a < b


@cube.function
def _le_kernel(a, b):
    return a <= b


@cube.function
def _gt_kernel(a, b):
    return a > b


@cube.function
def _ge_kernel(a, b):
    return a >= b


@cube.function
def _logical_and_kernel(a, b):
    return a and b


@cube.function
def _logical_or_kernel(a, b):
    return a or b


@cube.function
def _logical_xor_kernel(a, b):
    return cube.select(a, not b, b) if a.dtype == cube.bool_ else (a != a.dtype(0)) != (b != b.dtype(0))


for _name, _ref, _kernel in (("eq", np.equal, _eq_kernel), ("ne", np.not_equal, _ne_kernel),
                             ("lt", np.less, _lt_kernel), ("le", np.less_equal, _le_kernel),
                             ("gt", np.greater, _gt_kernel), ("ge", np.greater_equal, _ge_kernel),
                             ("logical_and", np.logical_and, _logical_and_kernel),
                             ("logical_or", np.logical_or, _logical_or_kernel),
                             ("logical_xor", np.logical_xor, _logical_xor_kernel)):
    binary(_name, _ref, _kernel, bool_out=True, allow_bool=True, upcast=False)


@cube.function
def _bitwise_and_kernel(a, b):
    return a & b


@cube.function
def _bitwise_or_kernel(a, b):
    return a | b


@cube.function
def _bitwise_xor_kernel(a, b):
    return a ^ b


@cube.function
def _left_shift_kernel(a, b):
    return a << b


@cube.function
def _right_shift_kernel(a, b):
    return a >> b


for _name, _ref, _kernel, _lowers in (("bitwise_and", np.bitwise_and, _bitwise_and_kernel, None),
                                      ("bitwise_or", np.bitwise_or, _bitwise_or_kernel, None),
                                      ("bitwise_xor", np.bitwise_xor, _bitwise_xor_kernel, None),
                                      # NumPy shifts bools as int8; the IR's shl/shr take integers only
                                      ("left_shift", np.left_shift, _left_shift_kernel, _not_bool),
                                      ("right_shift", np.right_shift, _right_shift_kernel, _not_bool)):
    binary(_name, _ref, _kernel, infer=_int_or_bool(_name), lowers=_lowers, upcast=False)


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
    c = ctx.input(0)
    _, (sa, _), (sb, _) = ctx.input_avals
    # A constant branch (relu's and masked_fill's fill value) needs no gradient: skip its select. The
    # other side selects against a scalar 0, which fuses; a zeros_like would be a fill run at once.
    ga = sum_to(g.where(c, 0), sa) if ctx.needs_grad(1) else None
    gb = sum_to(g.masked_fill(c, 0), sb) if ctx.needs_grad(2) else None
    return None, ga, gb


primitive("where", infer=_where_infer, vjp=_where_vjp, saves=saves_inputs_at(0))(lambda c, a, b: np.where(c, a, b))


def _cast_infer(x: Aval, *, dtype: DType) -> Aval:
    return Aval(x.shape, dtype)


def _cast_vjp(ctx, g):
    (_, src), = ctx.input_avals
    # complex -> real keeps the real part: its gradient is g + 0i; real -> complex: the real part of g
    return (g.cast(src) if src.is_inexact else None,)


def _cast_reference(x, *, dtype: DType):
    if dtype.is_bool:
        return x != 0
    if x.dtype.kind == "c" and not dtype.is_complex:
        x = x.real  # PyTorch discards the imaginary part
    if dtype.is_int and x.dtype.kind in "fV":
        return float_to_int(x, dtype)  # NaN and out of range defined, as on every device
    return x.astype(dtype.np)


primitive("cast", infer=_cast_infer, vjp=_cast_vjp, saves=saves_none, complex_rule=True)(_cast_reference)
