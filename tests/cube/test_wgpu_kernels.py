"""The cube kernel library through WGSL on a wgpu adapter (Mesa's lavapipe in CI), against NumPy.

Each host function runs unchanged on NumPy arrays with its launches sent to the wgpu runtime
(`host_runtime`), and on WgpuArrays (device-resident, views included). i64 outputs (argmax, sort,
integer sums) need the adapter's `shader-int64` and are refused by name without it; bools are emulated
as u32 words.
Skipped, with the reason printed, where wgpu or an adapter is missing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ember import kernels as K
from ember.cube.kernel import host_runtime
from ember.kernels import random as rnd
from ember.cube.runtime.wgpu import wgpu_available, wgpu_runtime
from ember.cube.targets.wgsl import WgslTargetError

AVAILABLE, WHY = wgpu_available()
if not AVAILABLE:
    print(f"\nwgpu kernel tests skipped: {WHY}")
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=f"wgpu: {WHY}")

rng = np.random.default_rng(7)
X = rng.standard_normal((37, 53)).astype(np.float32)
XI = rng.integers(-50, 50, (37, 53)).astype(np.int32)


@pytest.fixture(scope="module")
def wgpu():
    """Every kernel launch on NumPy arrays goes to the wgpu runtime while this fixture is active."""
    with host_runtime(wgpu_runtime()) as rt:
        yield rt


def close(got, want, rtol=2e-5, atol=2e-6):
    np.testing.assert_allclose(got, np.asarray(want), rtol=rtol, atol=atol)


_erf = np.vectorize(math.erf)
UNARY_F32 = {
    "neg": np.negative, "abs": np.abs, "sign": np.sign, "reciprocal": lambda x: 1 / x,
    "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2, "log10": np.log10,
    "log1p": np.log1p, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "sin": np.sin, "cos": np.cos,
    "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
    "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "erf": _erf,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "gelu": lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))),
    "floor": np.floor, "ceil": np.ceil, "round": np.round, "trunc": np.trunc,
}


def unary_input(op: str) -> np.ndarray:
    if op in ("log", "log2", "log10", "sqrt", "rsqrt"):
        return np.abs(X) + 0.01
    if op in ("asin", "acos"):
        return np.concatenate([np.clip(X, -0.95, 0.95).reshape(-1), np.linspace(-1, 1, 201, dtype=np.float32)])
    if op == "atanh":
        return np.clip(X, -0.95, 0.95)
    if op == "acosh":
        return np.abs(X) + 1
    if op == "log1p":
        return np.abs(X) - 0.5
    if op in ("expm1", "erf"):  # small arguments: where a naive formula loses its digits
        return np.concatenate([X, X * 1e-5])
    return X


@pytest.mark.parametrize("op", sorted(UNARY_F32))
def test_unary_f32(wgpu, op):
    x = unary_input(op)
    close(K.unary(op, x), UNARY_F32[op](x.astype(np.float64)), rtol=4e-6 if op in ("expm1", "erf") else 2e-5)


def test_unary_f32_special_values(wgpu):
    x = np.array([-np.inf, -100, -20, 0, 20, 100, np.inf], np.float32)
    close(K.unary("tanh", x), np.tanh(x))
    close(K.unary("exp", x), np.exp(x))  # exp(-100) is subnormal: a GPU may flush it to 0
    assert np.isnan(K.unary("sqrt", np.array([-1], np.float32)))[0]


@pytest.mark.parametrize("op, ref", [("neg", np.negative), ("abs", np.abs), ("sign", np.sign),
                                     ("bitwise_not", np.invert)])
def test_unary_i32(wgpu, op, ref):
    np.testing.assert_array_equal(K.unary(op, XI), ref(XI))


BINARY_F32 = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "maximum": np.maximum,
              "minimum": np.minimum, "atan2": np.arctan2, "remainder": np.remainder, "floor_divide": np.floor_divide,
              "pow": np.power}


@pytest.mark.parametrize("op", sorted(BINARY_F32))
def test_binary_f32_broadcasting_and_transposed(wgpu, op):
    b = rng.standard_normal((53, 1)).astype(np.float32).T  # (1, 53), a transposed view
    a = np.abs(X) + 0.5 if op == "pow" else X
    close(K.binary(op, a, b), BINARY_F32[op](a.astype(np.float64), b.astype(np.float64)), rtol=1e-5, atol=1e-5)


def test_pow_of_negative_bases_follows_c(wgpu):
    a = np.array([-2, -2, -8, 0, 0, 3], np.float32)
    b = np.array([2, 3, 1 / 3, 2, 0, 0.5], np.float32)
    got = K.binary("pow", a, b)
    close(got[[0, 1, 3, 4, 5]], np.power(a, b)[[0, 1, 3, 4, 5]])
    assert np.isnan(got[2])


BINARY_I32 = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum, "minimum": np.minimum,
              "remainder": np.remainder, "floor_divide": np.floor_divide, "bitwise_and": np.bitwise_and,
              "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor, "left_shift": np.left_shift,
              "right_shift": np.right_shift}


@pytest.mark.parametrize("op", sorted(BINARY_I32))
def test_binary_i32(wgpu, op):
    b = rng.integers(1, 7, 53).astype(np.int32)
    np.testing.assert_array_equal(K.binary(op, XI, b), BINARY_I32[op](XI, b))


def test_clamp_and_casts(wgpu):
    lo, hi = np.full(53, -0.5, np.float32), np.full((37, 1), 0.7, np.float32)
    close(K.ternary("clamp", X, lo, hi), np.clip(X, lo, hi))
    np.testing.assert_array_equal(K.cast(X * 10, np.int32), (X * 10).astype(np.int32))
    np.testing.assert_array_equal(K.cast(XI, np.float32), XI.astype(np.float32))
    if wgpu.caps.f16:
        np.testing.assert_array_equal(K.cast(X * 1000, np.float16), (X * 1000).astype(np.float16))


@pytest.mark.parametrize("op", ["sum", "mean", "prod", "amax", "amin", "var"])
@pytest.mark.parametrize("dims", [1, 0, (0, 1)])
def test_reduce_f32(wgpu, op, dims):
    x = X * 0.5 + 1 if op == "prod" else X
    ref = {"sum": np.sum, "mean": np.mean, "prod": np.prod, "amax": np.max, "amin": np.min,
           "var": lambda v, axis: np.var(v, axis=axis, ddof=1)}[op]
    close(K.reduce(op, x, dims), ref(x.astype(np.float64), axis=dims), rtol=1e-4, atol=1e-5)


def test_long_reductions_split_over_cubes(wgpu):
    x = rng.standard_normal(300_000).astype(np.float32)
    close(K.reduce("sum", x), x.astype(np.float64).sum(), rtol=1e-4, atol=1e-3)
    close(K.reduce("amax", x), x.max())


def test_reduce_i32_max(wgpu):
    np.testing.assert_array_equal(K.reduce("amax", XI, 1), XI.max(1))


def test_softmax_and_norms(wgpu):
    x64 = X.astype(np.float64)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    close(K.softmax(X), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    close(K.softmax(X, log=True), np.log(e / e.sum(-1, keepdims=True)), rtol=1e-5, atol=1e-5)
    w, b = rng.standard_normal(53).astype(np.float32), rng.standard_normal(53).astype(np.float32)
    mean, var = x64.mean(-1, keepdims=True), x64.var(-1, keepdims=True)
    close(K.layer_norm(X, w, b, 1e-5), (x64 - mean) / np.sqrt(var + 1e-5) * w + b, rtol=1e-4, atol=1e-4)
    close(K.rms_norm(X, w, 1e-6), x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6) * w, rtol=1e-4, atol=1e-4)


def test_matmul_batched_and_transposed(wgpu):
    a = rng.standard_normal((3, 33, 20)).astype(np.float32)
    b = rng.standard_normal((3, 41, 20)).astype(np.float32).transpose(0, 2, 1)
    close(K.matmul(a, b), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_random_streams_match_the_reference_bit_for_bit(wgpu):
    np.testing.assert_array_equal(K.bits((5, 7), seed=3, offset=11).reshape(-1), rnd.bits_reference(35, 3, 11))
    words = rnd.bits_reference(1000, 5)
    u = K.uniform((1000,), seed=5, low=-2.0, high=3.0)
    np.testing.assert_array_equal(u, np.float32(-2) + np.float32(5) * ((words >> 8).astype(np.float32) * 2**-24))
    z = K.normal((100_000,), seed=9)
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02


def test_scans(wgpu):
    close(K.scan("cumsum", X, 1), np.cumsum(X.astype(np.float64), 1), rtol=1e-4, atol=1e-4)
    close(K.scan("cumprod", X[:, :8] * 0.5 + 1, 0), np.cumprod((X[:, :8] * 0.5 + 1).astype(np.float64), 0), rtol=1e-4)


def test_indexing(wgpu):
    idx = rng.integers(0, 53, (37, 5)).astype(np.int32)
    np.testing.assert_array_equal(K.gather(X, idx, 1), np.take_along_axis(X, idx, 1))
    rows = np.array([4, 0, 4, 36], np.int32)
    np.testing.assert_array_equal(K.index_select(X, rows, 0), X[rows])
    src = rng.standard_normal((4, 53)).astype(np.float32)
    want = X.astype(np.float64).copy()
    np.add.at(want, rows, src)
    close(K.index_add(X, rows, src, 0), want, rtol=1e-5, atol=1e-5)  # duplicate rows: f32 atomic adds
    scattered = K.scatter(X, rows[[0, 1, 3]].reshape(3, 1).repeat(53, 1), src[:3], 0)
    expected = X.copy()
    expected[rows[[0, 1, 3]]] = src[:3]
    np.testing.assert_array_equal(scattered, expected)


def test_conv2d_and_pooling(wgpu):
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = sum(np.einsum("nchw,oc->nohw", xp[:, :, i:i + 9, j:j + 8], w[:, :, i, j])
               for i in range(3) for j in range(3))
    close(K.conv2d(x, w, 1, 1), want, rtol=1e-4, atol=1e-4)
    windows = x[:, :, :8, :8].reshape(2, 3, 4, 2, 4, 2)
    np.testing.assert_array_equal(K.max_pool2d(x, 2), windows.max((3, 5)))
    close(K.avg_pool2d(x, 2), windows.astype(np.float64).mean((3, 5)))


def test_64_bit_outputs_where_the_adapter_has_shader_int64(wgpu):
    """argmax and sort give i64 indices, integer sums accumulate in i64."""
    if not wgpu.caps.int64:
        with pytest.raises(WgslTargetError, match=r"of i64 cannot run on the WGSL target \(adapter"):
            K.reduce("argmax", X, 1)
        pytest.skip(f"{wgpu.adapter_name} lacks shader-int64: i64 refused by name")
    np.testing.assert_array_equal(K.reduce("argmax", X, 1), X.argmax(1))
    np.testing.assert_array_equal(K.sort(X)[1], np.argsort(X, kind="stable"))
    np.testing.assert_array_equal(K.reduce("sum", XI, 1), XI.sum(1, dtype=np.int64))


def test_bools_are_stored_as_words(wgpu):
    """Comparisons write bools, `where` and logical ops read them: u32 words on the device."""
    lt = K.binary("lt", X, X.T.T[::-1])
    np.testing.assert_array_equal(lt, X < X[::-1])
    np.testing.assert_array_equal(K.binary("logical_xor", lt, X > 0), np.logical_xor(lt, X > 0))
    np.testing.assert_array_equal(K.ternary("where", lt[:, ::2], X[:, ::2], XI[:, ::2].astype(np.float32)),
                                  np.where(lt[:, ::2], X[:, ::2], XI[:, ::2]))


def test_device_arrays_and_their_views_stay_on_the_device():
    """WgpuArrays in, WgpuArrays out: transposed, sliced and broadcast views read in place."""
    rt = wgpu_runtime()
    x, xi = rt.to_device(X), rt.to_device(XI)
    y = K.binary("add", x.T, x[:, ::-2][:, :1].T)           # (53, 37) + a broadcast row
    assert type(y) is type(x) and y.shape == (53, 37)
    close(y.numpy(), X.T + X[:, ::-2][:, :1].T)
    lt = K.binary("lt", x[3:9], x[:6])
    assert lt.dtype == np.bool_ and type(lt) is type(x)
    np.testing.assert_array_equal(lt.numpy(), X[3:9] < X[:6])
    np.testing.assert_array_equal(K.cast(lt.T, np.int32).numpy(), (X[3:9] < X[:6]).T.astype(np.int32))
    close(K.reduce("sum", x.T[::2], dims=0).numpy(), X.T[::2].sum(0), rtol=1e-5, atol=1e-5)
    close(K.matmul(x, x.T).numpy(), X @ X.T, rtol=1e-4, atol=1e-4)
    close(K.softmax(x[:, 1:]).numpy(), np.exp(X[:, 1:]) / np.exp(X[:, 1:]).sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(xi.reshape(53, 37).T.numpy(), XI.reshape(53, 37).T)
    np.testing.assert_array_equal(xi.T.reshape(-1).numpy(), XI.T.reshape(-1))   # a copy on the device
