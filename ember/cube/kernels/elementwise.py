"""Elementwise kernels: unary, binary and ternary ops with broadcasting and any strides, and cast.

One kernel per arity; the op is a comptime string, so each op compiles to its own specialized code.
Operands are read through their layouts (shape + strides, see `common.offset`) unless they are dense
with the output's shape, in which case the flat position is the offset (a comptime fast path).
Op names follow ember's primitives (`ember/ops/elementwise.py`). Arithmetic happens in the
operands' common dtype (f16/bf16 in f32 on the C target); comparisons and logical ops give bool.

Example:
    >>> binary("add", np.ones((2, 1), np.float32), np.arange(3, dtype=np.float32))
    array([[1., 2., 3.],
           [1., 2., 3.]], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from ... import cube
from ...dtype import bool_
from ...errors import DTypeError
from ..kernel import launch_runtime
from .common import (asarray, broadcast_layout, check_size, cube_dtype, element_at, empty, grid, is_dense, offset,
                     position, read_kind, result_type, row_layout, row_span)

UNARY_OPS = ("neg", "abs", "sign", "reciprocal", "square", "exp", "exp2", "expm1", "log", "log2", "log10",
             "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh",
             "asinh", "acosh", "atanh", "erf", "erfinv", "sigmoid", "relu", "gelu", "silu", "floor", "ceil", "round",
             "trunc", "logical_not", "bitwise_not")
FLOAT_UNARY = frozenset(UNARY_OPS) - {"neg", "abs", "sign", "square", "relu", "logical_not", "bitwise_not"}
BINARY_OPS = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "atan2", "remainder", "floor_divide",
              "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
              "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift")
FLOAT_BINARY = frozenset(("div", "pow", "atan2"))
BOOL_OUT = frozenset(("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
                      "logical_not"))
TERNARY_OPS = ("where", "clamp")
# A strided unary input (a transposing or slicing copy, most often) whose merged innermost dim has at
# least ROW_MIN elements runs a cube per row of at most ROW_UNITS units; outer dims are padded to
# ROW_OUTER_RANK so that ranks 1..4 share one compiled kernel.
ROW_MIN, ROW_UNITS, ROW_OUTER_RANK = 16, 64, 3
# That kernel on GPU targets for rows of at most GPU_SHORT_ROW: units a cube, elements of a row a unit.
GPU_ROW_UNITS, GPU_ROW_ELEMENTS, GPU_SHORT_ROW = 256, 4, 256


@cube.function
def unary_op(op, x):
    """`op` (comptime name) applied to kernel value `x`."""
    t = x.dtype
    if op == "neg":
        return -x
    if op == "abs":
        return cube.abs(x)
    if op == "sign":
        return cube.select(x > t(0), t(1), cube.select(x < t(0), t(-1), t(0)))
    if op == "reciprocal":
        return cube.reciprocal(x)
    if op == "square":
        return x * x
    if op == "sigmoid":
        return t(1) / (t(1) + cube.exp(-x))
    if op == "relu":
        return cube.select(x > t(0), x, t(0))
    if op == "gelu":
        return t(0.5) * x * (t(1) + cube.erf(x * t(0.7071067811865476)))
    if op == "silu":
        return x / (t(1) + cube.exp(-x))
    if op == "logical_not":
        return not x
    if op == "bitwise_not":
        return ~x
    return math_op(op, x)


@cube.function
def math_op(op, x):
    if op == "exp":
        return cube.exp(x)
    if op == "exp2":
        return cube.exp2(x)
    if op == "expm1":
        return cube.expm1(x)
    if op == "log":
        return cube.log(x)
    if op == "log2":
        return cube.log2(x)
    if op == "log10":
        return cube.log10(x)
    if op == "log1p":
        return cube.log1p(x)
    if op == "sqrt":
        return cube.sqrt(x)
    if op == "rsqrt":
        return cube.rsqrt(x)
    if op == "sin":
        return cube.sin(x)
    if op == "cos":
        return cube.cos(x)
    if op == "tan":
        return cube.tan(x)
    if op == "asin":
        return cube.asin(x)
    if op == "acos":
        return cube.acos(x)
    if op == "atan":
        return cube.atan(x)
    if op == "sinh":
        return cube.sinh(x)
    if op == "cosh":
        return cube.cosh(x)
    if op == "tanh":
        return cube.tanh(x)
    if op == "asinh":
        return cube.asinh(x)
    if op == "acosh":
        return cube.acosh(x)
    if op == "atanh":
        return cube.atanh(x)
    if op == "erf":
        return cube.erf(x)
    if op == "erfinv":
        return erfinv(x)
    if op == "floor":
        return cube.floor(x)
    if op == "ceil":
        return cube.ceil(x)
    if op == "round":
        return cube.round(x)
    if op == "trunc":
        return cube.trunc(x)
    assert False, f"unknown unary op {op}"


@cube.function
def erfinv(y):
    """Inverse error function: Giles' single-precision start, then two Newton steps on erf (as the
    reference, `ember/ops/elementwise.py`); +-inf at +-1, NaN outside [-1, 1]."""
    t = y.dtype
    w = -cube.log((t(1) - y) * (t(1) + y))
    ws = w - t(2.5)
    wl = cube.sqrt(cube.select(w < t(5), t(5), w)) - t(3)
    small = t(2.81022636e-08)
    for c in cube.unroll((3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                          -0.00417768164, 0.246640727, 1.50140941)):
        small = t(c) + small * ws
    large = t(-0.000200214257)
    for c in cube.unroll((0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                          0.00943887047, 1.00167406, 2.83297682)):
        large = t(c) + large * wl
    x = cube.select(w < t(5), small, large) * y
    for _ in cube.unroll(range(2)):
        x = x - (cube.erf(x) - y) / (t(1.1283791670955126) * cube.exp(-x * x))
    edge = cube.select(y > t(0), t(float("inf")), t(float("-inf")))
    return cube.select(cube.abs(y) == t(1), edge, x)


@cube.function
def binary_op(op, a, b):
    """`op` (comptime name) of kernel values `a` and `b` of one dtype (NumPy semantics)."""
    t = a.dtype
    if op == "add":
        return (a or b) if t == cube.bool_ else a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return (a and b) if t == cube.bool_ else a * b
    if op == "div":
        return a / b
    if op == "pow":
        return cube.pow(a, b)
    if op == "atan2":
        return cube.atan2(a, b)
    if op == "maximum" or op == "minimum":
        best = cube.max(a, b) if op == "maximum" else cube.min(a, b)
        if t.is_float:  # NaN wins, as in NumPy
            best = cube.select(a != a, a, cube.select(b != b, b, best))
        return best
    if op == "remainder":
        if t.is_float:
            r = a % b  # fmod: sign of a; NumPy's remainder takes the sign of b
            return cube.select((r != t(0)) and ((r < t(0)) != (b < t(0))), r + b, r)
        # Truncated (0 by 0 and by -1: the IR's integer semantics), then moved to b's sign. The steps
        # here and below are arithmetic on the condition: gcc may make a select a branch, which
        # mispredicts on operands of mixed signs.
        r = a % b
        return r + b * cube.cast((r != t(0)) and ((r < t(0)) != (b < t(0))), t)
    if op == "floor_divide":
        if t.is_float:
            return cube.floor(a / b)
        q = a // b  # truncates (0 by 0, MIN by -1 is MIN); one down when the signs differ and it is inexact
        return q - cube.cast((a % b != t(0)) and ((a < t(0)) != (b < t(0))), t)
    return compare_op(op, a, b)


@cube.function
def compare_op(op, a, b):
    if op == "eq":
        return a == b
    if op == "ne":
        return a != b
    if op == "lt":
        return a < b
    if op == "le":
        return a <= b
    if op == "gt":
        return a > b
    if op == "ge":
        return a >= b
    if op == "logical_and":
        return a and b
    if op == "logical_or":
        return a or b
    if op == "logical_xor":
        return cube.select(a, not b, b) if a.dtype == cube.bool_ else (a != a.dtype(0)) != (b != b.dtype(0))
    if op == "bitwise_and":
        return a & b
    if op == "bitwise_or":
        return a | b
    if op == "bitwise_xor":
        return a ^ b
    if op == "left_shift":
        return a << b
    if op == "right_shift":
        return a >> b
    assert False, f"unknown binary op {op}"


@cube.kernel
def unary_kernel(x: cube.Array, out: cube.Array, layout: cube.Array[cube.i32], op: cube.Comptime[str],
                 T: cube.Comptime, ndim: cube.Comptime[int], dense: cube.Comptime[bool],
                 shifted: cube.Comptime[bool]):
    i = position(len(out), shifted)
    if shifted or i < len(out):
        xi = i if dense else offset(i, layout, ndim, 0)
        v = cube.cast(x[xi], T)
        out[i] = cube.cast(v if op == "cast" else unary_op(op, v), out.dtype)


@cube.kernel
def unary_rows_kernel(x: cube.Array, out: cube.Array, layout: cube.Array[cube.i32], parts: cube.i32,
                      op: cube.Comptime[str], T: cube.Comptime, ndim: cube.Comptime[int], units: cube.Comptime[int],
                      unit_step: cube.Comptime[bool], rows: cube.Comptime[int]):
    """`unary_kernel` over a strided x read as rows (`common.row_layout`, `ndim` outer dims): each of the
    `parts` output rows (or parts of a long row, `common.row_span`) is taken by `units` units (UNIT_POS_X),
    `rows` of them per cube (UNIT_POS_Y), which find the row's start in x once, then walk it
    (contiguously when `unit_step`): no per-element coordinate decoding, no masked lane."""
    if rows == 1:
        unary_row(x, out, layout, cube.CUBE_POS, op, T, ndim, units, unit_step)
    else:
        at = cube.CUBE_POS * rows + cube.UNIT_POS_Y
        if at < parts:
            unary_row(x, out, layout, at, op, T, ndim, units, unit_step)


@cube.function
def unary_row(x, out, layout, at, op, T, ndim, units, unit_step):
    """Part `at` of the rows of `unary_rows_kernel`, by this unit's place along it (UNIT_POS_X)."""
    n = layout[2 * ndim]
    row, lo, hi = row_span(layout[2 * ndim + 2], n, at)
    step = 1 if unit_step else layout[2 * ndim + 1]
    src = offset(row, layout, ndim, 0)
    for j0 in range(lo, hi, units):
        j = cube.min(j0, hi - units) + cube.UNIT_POS_X  # the last chunk shifted back inside (units <= hi - lo)
        out[row * n + j] = unary_at(op, T, x, src + j * step, out.dtype)


@cube.function
def unary_at(op, T, x, at, out_t):
    """`op` of x[at], computed in T, as `out_t` ("cast" converts only)."""
    v = cube.cast(x[at], T)
    return cube.cast(v if op == "cast" else unary_op(op, v), out_t)


@cube.kernel
def binary_kernel(a: cube.Array, b: cube.Array, out: cube.Array, layout: cube.Array[cube.i32],
                  op: cube.Comptime[str], T: cube.Comptime, ndim: cube.Comptime[int],
                  kinds: cube.Comptime[tuple], shifted: cube.Comptime[bool]):
    i = position(len(out), shifted)
    if shifted or i < len(out):
        ai = element_at(i, layout, ndim, 0, kinds[0])
        bi = element_at(i, layout, ndim, 1, kinds[1])
        out[i] = cube.cast(binary_op(op, cube.cast(a[ai], T), cube.cast(b[bi], T)), out.dtype)


@cube.kernel
def ternary_kernel(a: cube.Array, b: cube.Array, c: cube.Array, out: cube.Array,
                   layout: cube.Array[cube.i32], op: cube.Comptime[str], T: cube.Comptime,
                   ndim: cube.Comptime[int], kinds: cube.Comptime[tuple], shifted: cube.Comptime[bool]):
    i = position(len(out), shifted)
    if shifted or i < len(out):
        ai = element_at(i, layout, ndim, 0, kinds[0])
        bi = element_at(i, layout, ndim, 1, kinds[1])
        ci = element_at(i, layout, ndim, 2, kinds[2])
        if op == "where":  # where(cond, then, else)
            r = cube.select(cube.cast(a[ai], cube.bool_), cube.cast(b[bi], T), cube.cast(c[ci], T))
        else:  # clamp(x, lo, hi)
            r = cube.min(cube.max(cube.cast(a[ai], T), cube.cast(b[bi], T)), cube.cast(c[ci], T))
        out[i] = cube.cast(r, out.dtype)



def _launch(kernel, n: int, /, *args, **comptime) -> None:
    count, dim = grid(n)
    kernel.launch(count, dim, *args, shifted=n >= dim.x, **comptime)


def unary(op: str, x: np.ndarray, out_dtype=None) -> np.ndarray:
    """`op(x)` elementwise; `x` may have any strides. Float-only ops reject ints (cast first).

    Example:
        >>> unary("exp", np.zeros(3, np.float32))
        array([1., 1., 1.], dtype=float32)
    """
    if op not in UNARY_OPS:
        raise ValueError(f"unknown unary op {op!r}; known: {', '.join(UNARY_OPS)}")
    t = cube_dtype(x.dtype)
    if op in FLOAT_UNARY and not t.is_float:
        raise DTypeError(f"{op} needs a float input, got {t.name}")
    out_t = bool_ if op in BOOL_OUT else cube_dtype(out_dtype) if out_dtype is not None else t
    return _unary(x, op, t, out_t)


def cast(x: np.ndarray, dtype) -> np.ndarray:
    """`x` converted to `dtype` (floats to ints truncate toward zero; to bool is `!= 0`)."""
    return _unary(x, "cast", cube_dtype(x.dtype), cube_dtype(dtype))


def _unary(x: np.ndarray, op: str, t, out_t) -> np.ndarray:
    check_size(op, x)
    out = empty(x.shape, out_t.np, x)
    dense = is_dense(x.shape, x)
    rows = None if dense or out.size == 0 else row_layout(x, ROW_MIN, ROW_OUTER_RANK)
    if rows is None:
        _launch(unary_kernel, out.size, x, out, broadcast_layout(x.shape, x), op=op, T=t, ndim=x.ndim,
                dense=dense)
    else:  # a strided copy (a transpose, a slice) with long enough rows: a cube per row
        parts, layout = rows
        ndim = (len(layout) - 3) // 2
        units = min(ROW_UNITS, 1 << (int(layout[-3]).bit_length() - 1))  # a power of two <= the row length
        per = 1
        if layout[-3] <= GPU_SHORT_ROW and getattr(launch_runtime(x), "target", "cpu") != "cpu":
            # GPU targets, short rows: GPU_ROW_ELEMENTS elements of a row per unit and several rows per
            # cube. The index arithmetic of a row (a division per outer dim) is the cost of such a copy:
            # one element per unit, a row of 64 f32 per cube (the heads of attention) took 61 us for 25 MB
            # on an H200 (12 us of traffic), 47 us with four rows per cube, 23 us so. (Long rows keep a
            # cube per row or part: few of them would leave most of the GPU idle.)
            units = max(1, units // GPU_ROW_ELEMENTS)
            per = GPU_ROW_UNITS // units
        unary_rows_kernel.launch(cube.CubeCount(-(-parts // per)), cube.CubeDim(units, per), x, out, layout, parts,
                                 op=op, T=t, ndim=ndim, units=units, unit_step=bool(layout[-2] == 1), rows=per)
    return out


def binary(op: str, a: np.ndarray, b: np.ndarray, out_dtype=None) -> np.ndarray:
    """`op(a, b)` with NumPy broadcasting, computed in the operands' common dtype.

    Example:
        >>> binary("lt", np.arange(3), np.array([1]))
        array([ True, False, False])
    """
    if op not in BINARY_OPS:
        raise ValueError(f"unknown binary op {op!r}; known: {', '.join(BINARY_OPS)}")
    a, b = asarray(a), asarray(b)
    t = cube_dtype(result_type(a, b))
    if op in FLOAT_BINARY and not t.is_float:
        raise DTypeError(f"{op} needs float inputs, got {t.name}")
    shape = np.broadcast_shapes(a.shape, b.shape)
    out_t = bool_ if op in BOOL_OUT else cube_dtype(out_dtype) if out_dtype is not None else t
    out = empty(shape, out_t.np, a, b)
    check_size(op, a, b, out)
    _launch(binary_kernel, out.size, a, b, out, broadcast_layout(shape, a, b), op=op, T=t, ndim=len(shape),
            kinds=(read_kind(shape, a), read_kind(shape, b)))
    return out


def ternary(op: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """`where(a, b, c)` (a is the condition) or `clamp(a, b, c)`, with broadcasting.

    Example:
        >>> ternary("where", np.array([True, False]), np.ones(2), np.zeros(2))
        array([1., 0.])
    """
    if op not in TERNARY_OPS:
        raise ValueError(f"unknown ternary op {op!r}; known: {', '.join(TERNARY_OPS)}")
    a, b, c = asarray(a), asarray(b), asarray(c)
    t = cube_dtype(result_type(b, c) if op == "where" else result_type(a, b, c))
    shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
    out = empty(shape, t.np, a, b, c)
    check_size(op, a, b, c, out)
    _launch(ternary_kernel, out.size, a, b, c, out, broadcast_layout(shape, a, b, c), op=op, T=t,
            ndim=len(shape), kinds=tuple(read_kind(shape, x) for x in (a, b, c)))
    return out
