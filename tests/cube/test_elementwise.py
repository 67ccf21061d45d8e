"""Elementwise kernels against NumPy: every op, broadcasting, strides, dtypes."""

import math

import ml_dtypes
import numpy as np
import pytest
import torch

from ember.kernels import elementwise as ew
from ember.kernels.common import ROW_CHUNK
from ember.errors import DTypeError

rng = np.random.default_rng(1)
erf = np.vectorize(math.erf)

UNARY_REF = {
    "neg": np.negative, "abs": np.abs, "sign": np.sign, "reciprocal": np.reciprocal,
    "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2, "log10": np.log10,
    "log1p": np.log1p, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "sin": np.sin, "cos": np.cos,
    "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh,
    "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "erf": erf, "erfinv": lambda x: torch.special.erfinv(torch.from_numpy(x)).numpy(), "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2))), "isnan": np.isnan, "isinf": np.isinf,
    "floor": np.floor, "ceil": np.ceil, "round": np.round, "trunc": np.trunc,
    "logical_not": np.logical_not, "bitwise_not": np.invert,
}
DOMAIN = {"log": (0.1, 5), "log2": (0.1, 5), "log10": (0.1, 5), "log1p": (-0.5, 5), "sqrt": (0.1, 5),
          "rsqrt": (0.1, 5), "asin": (-0.9, 0.9), "acos": (-0.9, 0.9), "atanh": (-0.9, 0.9),
          "acosh": (1.1, 5), "reciprocal": (0.5, 3), "erfinv": (-0.9, 0.9)}


def test_every_unary_op_on_a_transposed_view(parallel):
    assert set(UNARY_REF) == set(ew.UNARY_OPS)

    def check(op):
        if op == "bitwise_not":
            x = rng.integers(-100, 100, (5, 7)).astype(np.int32).T
        else:
            lo, hi = DOMAIN.get(op, (-3, 3))
            x = rng.uniform(lo, hi, (5, 7)).astype(np.float32).T  # non-contiguous input
        got = ew.unary(op, x)
        want = UNARY_REF[op](x.astype(np.float64) if x.dtype.kind == "f" else x)
        assert got.shape == x.shape and got.flags.c_contiguous, op
        np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64), rtol=3e-6,
                                   atol=3e-6, err_msg=op)

    parallel(check, ew.UNARY_OPS)


BINARY_REF = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
    "maximum": np.maximum, "minimum": np.minimum, "atan2": np.arctan2, "remainder": np.remainder,
    "floor_divide": np.floor_divide, "eq": np.equal, "ne": np.not_equal, "lt": np.less,
    "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "logical_and": np.logical_and,
    "logical_or": np.logical_or, "logical_xor": np.logical_xor, "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor, "left_shift": np.left_shift,
    "right_shift": np.right_shift,
}
INT_BINARY = {"bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"}


def test_every_binary_op_with_broadcasting(parallel):
    assert set(BINARY_REF) == set(ew.BINARY_OPS)

    def check(op):
        if op in INT_BINARY:
            a = rng.integers(0, 100, (3, 1, 4)).astype(np.int32)
            b = rng.integers(0, 5, (5, 1)).astype(np.int32)
        else:
            a = rng.uniform(-3, 3, (3, 1, 4)).astype(np.float32)
            b = rng.uniform(0.5, 2, (5, 1)).astype(np.float32) * rng.choice([-1, 1], (5, 1)).astype(np.float32)
            if op == "pow":
                a = np.abs(a) + 0.1
            b[0, 0] = a[0, 0, 0] if op in ("eq", "le", "ge") else b[0, 0]
        got = ew.binary(op, a, b)
        want = BINARY_REF[op](a, b)
        assert got.shape == want.shape and got.dtype == want.dtype, op
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6, err_msg=op)

    parallel(check, ew.BINARY_OPS)


def test_integer_division_and_remainder_follow_numpy():
    a = np.array([-7, 7, -7, 7, 5, 0, -3], np.int64)
    b = np.array([2, -2, -2, 2, 0, 3, 5], np.int64)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(ew.binary("floor_divide", a, b), np.floor_divide(a, b))
        np.testing.assert_array_equal(ew.binary("remainder", a, b), np.remainder(a, b))


def test_nan_wins_in_maximum_and_minimum():
    a = np.array([np.nan, 1.0, 2.0], np.float32)
    b = np.array([0.0, np.nan, 1.0], np.float32)
    np.testing.assert_array_equal(ew.binary("maximum", a, b), np.maximum(a, b))
    np.testing.assert_array_equal(ew.binary("minimum", a, b), np.minimum(a, b))


@pytest.mark.parametrize("shape", [(), (0,), (1,), (2, 0, 3), (4, 1)])
def test_edge_shapes(shape):
    a = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(ew.binary("mul", a, np.float32(2)), a * 2)
    assert ew.unary("neg", a).shape == shape


def test_dtypes_and_negative_strides(parallel):
    cases = [np.float64, np.float16, ml_dtypes.bfloat16, np.int64, np.int16, np.uint8]

    def check(dtype):
        a = (rng.uniform(0, 20, (6, 5)).astype(dtype))[::-2, 1:]
        b = (rng.uniform(1, 5, (5, 1, 4)).astype(dtype))
        got = ew.binary("add", a, b)
        want = (a.astype(np.float64) + b.astype(np.float64)).astype(dtype)
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-2)

    parallel(check, cases)


def test_ternary_where_and_clamp():
    c = rng.random((4, 1)) > 0.5
    a = rng.standard_normal((1, 6)).astype(np.float32)
    b = rng.standard_normal((4, 6)).astype(np.float32)[:, ::-1]
    np.testing.assert_array_equal(ew.ternary("where", c, a, b), np.where(c, a, b))
    np.testing.assert_array_equal(ew.ternary("clamp", b, np.float32(-0.5), np.float32(0.5)),
                                  np.clip(b, -0.5, 0.5))


def test_cast(parallel):
    x = np.array([1.7, -1.7, 0.0, 250.5, -0.2], np.float32)
    targets = [np.int32, np.int8, np.bool_, np.float16, ml_dtypes.bfloat16, np.float64]

    def check(dtype):
        got = ew.cast(x, dtype)
        want = (x != 0) if dtype is np.bool_ else np.trunc(x).astype(dtype) if np.dtype(dtype).kind == "i" \
            else x.astype(dtype)
        if dtype is np.int8:
            want = np.trunc(x).astype(np.int32).astype(np.int8)
        np.testing.assert_array_equal(got, want, err_msg=str(dtype))

    parallel(check, targets)


def test_strided_copies_run_row_by_row(parallel):
    # Views whose merged innermost dim is long enough run line by line: rows read contiguously or with a
    # stride, long rows or not, 1-D to 5-D, negative strides.
    base = rng.standard_normal((6, 5, 4, 70)).astype(np.float32)
    long_rows = rng.standard_normal((2, 3 * ROW_CHUNK + 5)).astype(np.float32)
    views = [base.transpose(1, 0, 2, 3), base[:, ::2, :, ::-1], base[0, 0, :, ::3], base[..., :64].transpose(2, 1, 0, 3),
             base.reshape(3, 2, 5, 4, 70).transpose(1, 0, 3, 2, 4), base[1, 1, 1, 2:60:2], base[0].reshape(20, 70).T,
             long_rows[:, ::-1], long_rows.reshape(-1)[::2]]  # rows cut in parts (`row_span`)

    def check(case):
        x, dtype = case
        assert not x.flags.c_contiguous
        got = ew.cast(x, dtype)
        assert got.shape == x.shape and got.flags.c_contiguous
        np.testing.assert_array_equal(got, x.astype(dtype))
        np.testing.assert_allclose(ew.unary("exp", x), np.exp(x.astype(np.float64)), rtol=3e-6)

    parallel(check, [(v, t) for v in views for t in (np.float32, np.float64)])


def test_float_only_ops_reject_ints():
    with pytest.raises(DTypeError):
        ew.unary("exp", np.arange(3))
    with pytest.raises(ValueError, match="unknown"):
        ew.binary("nope", np.ones(1), np.ones(1))
