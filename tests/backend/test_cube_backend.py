"""The Cube(cpu) backend against the NumPy backend: every lowered primitive on random inputs.

Each check runs one primitive on both backends with the same inputs and params (the output aval comes
from the primitive's shape rule, as in `ember.tensor.bind`) and compares values, shapes and dtypes with
the per-dtype tolerances of `tests/tolerances.py`. Inputs cover 0-d, 0-size, broadcast and
non-contiguous (transposed) operands, in f32/f64/f16/bf16/i32/i64/bool where the primitive allows.
A check also asserts that the primitive ran on a kernel, not on the NumPy fallback.

The whole conformance suite runs on this backend once `Device.cpu()` is served by it (see
`ember/backend/cube/backend.py`); `test_fallback_report` prints what still runs on NumPy.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ember import cube
from ember.backend.cube import CubeBackend
from ember.cube.runtime.cpu import cpu_runtime
from ember.backend.cube.lowering import TABLE
from ember.kernels.sort import MAX_ROW
from ember.backend.numpy import NumpyBackend
from ember.dtype import dtype_of
from ember.errors import DTypeError, ShapeError
from ember.ops import registry
from ember.ops.primitive import Aval
from tolerances import forward

pytestmark = pytest.mark.skipif(not cube.cpu_available()[0], reason=f"no cube C compiler: {cube.cpu_available()[1]}")

FLOATS = ("f32", "f64", "f16", "bf16")
INTS = ("i32", "i64")
DTYPES = FLOATS + INTS + ("bool",)
SHAPES = [(), (0,), (7,), (3, 4), (2, 3, 5)]
BROADCAST_PAIRS = [((3, 4), (3, 4)), ((), (3, 4)), ((3, 1), (1, 4)), ((4,), (2, 3, 4)), ((1,), (0,)),
                   ((2, 0), (1, 1))]
# Inputs inside each float op's domain (NaN outside it would compare equal and test nothing).
DOMAIN = {"log": (0.1, 5), "log2": (0.1, 5), "log10": (0.1, 5), "log1p": (-0.5, 5), "sqrt": (0.1, 5),
          "rsqrt": (0.1, 5), "erfinv": (-0.99, 0.99), "asin": (-0.9, 0.9), "acos": (-0.9, 0.9), "atanh": (-0.9, 0.9),
          "acosh": (1.1, 5), "reciprocal": (0.5, 3), "pow": (0.5, 2)}
NUMPY = NumpyBackend()


@pytest.fixture
def backend() -> CubeBackend:
    return CubeBackend(cpu_runtime())


def sample(shape, dtype: str, rng, low=-3.0, high=3.0, transposed: bool = False) -> np.ndarray:
    """Random values of `dtype`; `transposed` gives the same shape as a non-contiguous view."""
    shape = tuple(shape)
    if transposed:
        return sample(shape[::-1], dtype, rng, low, high).T
    if dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    if dtype in FLOATS:
        return np.asarray(rng.uniform(low, high, shape)).astype(dtype_of(dtype).np)
    return np.asarray(rng.integers(math.floor(low), math.ceil(high) + 1, shape)).astype(dtype_of(dtype).np)


def assert_same(got: np.ndarray, want: np.ndarray, dtype) -> None:
    assert isinstance(got, np.ndarray)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    if dtype.is_float:
        rtol, atol = forward(dtype)
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


def check(backend: CubeBackend, name: str, *arrays: np.ndarray, **params) -> bool:
    """Run `name` on both backends and compare; False when the primitive or its reference refuses the
    inputs (e.g. NumPy has no `neg` of bools)."""
    prim = registry[name]
    try:
        out = prim.infer(*(Aval(a.shape, dtype_of(a.dtype)) for a in arrays), **params)
        want = NUMPY.execute(prim, arrays, params, out)
    except (DTypeError, ShapeError, TypeError):
        return False
    got = backend.execute(prim, arrays, params, out)
    assert_same(got, want, out.dtype)
    assert name not in backend.fallbacks, f"{name} ran on the NumPy fallback"
    return True


UNARY = ["neg", "abs", "sign", "reciprocal", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt",
         "rsqrt", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
         "erf", "erfinv", "sigmoid", "gelu", "floor", "ceil", "round", "trunc", "logical_not", "bitwise_not", "isnan",
         "isinf"]
BINARY = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "atan2", "remainder", "floor_divide", "eq", "ne",
          "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or",
          "bitwise_xor", "left_shift", "right_shift"]


# ---- elementwise ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", UNARY)
def test_unary(backend, rng, name):
    low, high = DOMAIN.get(name, (-3, 3))
    ran = 0
    for dtype in DTYPES:
        for shape in SHAPES:
            for transposed in (False, True):
                ran += check(backend, name, sample(shape, dtype, rng, low, high, transposed))
    assert ran


def test_unary_special_values(backend):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, 1.5, 2.5, -2.5], np.float32)
    for name in ("sign", "round", "isnan", "isinf", "abs", "floor", "trunc", "exp", "tanh", "sigmoid"):
        assert check(backend, name, x)


def test_sign_of_unsigned(backend, rng):
    assert check(backend, "sign", sample((5, 3), "i64", rng, 0, 3).astype(np.uint8))


@pytest.mark.parametrize("name", BINARY)
def test_binary(backend, rng, name):
    low, high = DOMAIN.get(name, (-3, 3))
    ran = 0
    for dtype in DTYPES:
        if name in ("pow", "div", "atan2") and dtype not in FLOATS or name.endswith("shift") and dtype == "bool":
            continue  # cases that run on the fallback: see test_float_only_ops_on_ints_fall_back
        for sa, sb in BROADCAST_PAIRS:
            for transposed in (False, True):
                a = sample(sa, dtype, rng, low, high, transposed)
                # Shifts past the width are undefined in C: keep the count small. Ints divide by 0 too.
                b = sample(sb, dtype, rng, 0, 7) if name.endswith("shift") else sample(sb, dtype, rng, low, high)
                ran += check(backend, name, a, b)
    assert ran


@pytest.mark.parametrize("dtype", ["i8", "i16", "u8"])
def test_narrow_ints_run_wide_and_wrap_like_numpy(backend, rng, dtype):
    """i8/i16/u8 ops run on the i32 kernels (`lowering._WIDE`): results must wrap as in the narrow type."""
    info = np.iinfo(dtype_of(dtype).np)
    a = rng.integers(info.min, info.max + 1, (4, 6)).astype(dtype_of(dtype).np)
    b = rng.integers(info.min, info.max + 1, (6,)).astype(dtype_of(dtype).np)
    for name in BINARY:
        if name in ("pow", "div", "atan2"):
            continue
        # Shifts past the width are undefined in C: keep the count small. Ints divide by 0 too.
        assert check(backend, name, a.T.copy().T, b % 7 if name.endswith("shift") else b)
    for name in ("neg", "abs", "sign", "bitwise_not", "logical_not"):
        assert check(backend, name, a)


def test_integer_division_by_zero_and_signs(backend):
    a = np.array([7, -7, 7, -7, 5, 0], np.int32)
    b = np.array([2, 2, -2, -2, 0, 0], np.int32)
    assert check(backend, "remainder", a, b) and check(backend, "floor_divide", a, b)


def test_float_only_ops_on_ints_fall_back(backend, rng):
    a, b = sample((3, 4), "i32", rng, 1, 3), sample((3, 4), "i32", rng, 0, 3)
    prim = registry["pow"]
    out = prim.infer(Aval(a.shape, dtype_of(a.dtype)), Aval(b.shape, dtype_of(b.dtype)))
    np.testing.assert_array_equal(backend.execute(prim, (a, b), {}, out), np.power(a, b))
    assert backend.fallbacks == {"pow"}


def test_where(backend, rng):
    for dtype in DTYPES:
        for sc, sa, sb in [((3, 4), (3, 4), (3, 4)), ((3, 1), (1, 4), ()), ((0,), (1,), (0,)), ((), (), ())]:
            c = sample(sc, "bool", rng)
            assert check(backend, "where", c, sample(sa, dtype, rng, transposed=True), sample(sb, dtype, rng))


@pytest.mark.parametrize("src", DTYPES + ("u8",))
def test_cast(backend, rng, src):
    # Float to int truncates toward zero; keep values where every target dtype holds them.
    low, high = (0, 100) if src == "u8" else (-100, 100)
    for dst in DTYPES + ("u8",):
        for shape in SHAPES:
            x = sample(shape, src, rng, low, high, transposed=len(shape) > 1)
            if dst == "u8":
                x = abs(x) if src != "bool" else x
            assert check(backend, "cast", x, dtype=dtype_of(dst))


# ---- reductions, scans, sorts ---------------------------------------------------------------------

REDUCE_CASES = [((2, 3, 5), (1,), False), ((2, 3, 5), (0, 2), True), ((2, 3, 5), (0, 1, 2), False),
                ((), (), False), ((4, 0), (1,), False), ((4, 0), (0,), True), ((6, 300), (1,), False)]


@pytest.mark.parametrize("name", ["sum", "prod", "amax", "amin"])
def test_reduce(backend, rng, name):
    ran = 0
    for dtype in DTYPES:
        # Products of many values overflow ints differently only in the last bits: keep them near 1.
        low, high = (0.5, 1.5) if name == "prod" else (-3, 3)
        for shape, dims, keepdim in REDUCE_CASES:
            for transposed in (False, True):
                x = sample(shape, dtype, rng, low, high, transposed)
                ran += check(backend, name, x, dims=dims, keepdim=keepdim)
    assert ran


def test_reduce_propagates_nan(backend):
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]], np.float32)
    for name in ("sum", "amax", "amin"):
        assert check(backend, name, x, dims=(1,), keepdim=False)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reduce(backend, rng, name):
    ties = np.array([[1, 3, 3, 0], [2, 2, 2, 2], [5, 1, 5, 1]], np.float32)
    nans = np.array([[1, np.nan, 3, np.nan]], np.float32)
    for x in (ties, nans, ties.T, ties.astype(np.int32), np.float32(2.0).reshape(())):
        for dim in range(max(x.ndim, 1)):
            for keepdim in (False, True):
                assert check(backend, name, x, dim=dim, keepdim=keepdim)
    for dtype in DTYPES:
        assert check(backend, name, sample((4, 7, 3), dtype, rng, transposed=True), dim=1, keepdim=False)


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_scan(backend, rng, name):
    low, high = (0.5, 1.5) if name == "cumprod" else (-3, 3)
    for dtype in FLOATS + ("i64",):  # the tensor layer scans ints in i64
        for shape in SHAPES:
            for dim in range(max(len(shape), 1)):
                assert check(backend, name, sample(shape, dtype, rng, low, high, transposed=True), dim=dim)


def test_cumextreme_index(backend, rng):
    for dtype in DTYPES:
        x = sample((5, 9), dtype, rng, -2, 2)  # few distinct values: ties report the last position
        if dtype in FLOATS:
            x[1, 3] = x[2, 2] = x[2, 6] = np.nan  # a NaN sticks as the extreme; each NaN is reached again
        for dim in (0, 1):
            for largest in (True, False):
                assert check(backend, "cumextreme_index", x.T.copy().T, dim=dim, largest=largest)
                assert check(backend, "cumextreme_index", sample((0, 3), dtype, rng), dim=dim, largest=largest)
    assert check(backend, "cumextreme_index", np.float32(1).reshape(()), dim=0, largest=True)


def test_argsort(backend, rng):
    for dtype in DTYPES:
        for shape in [(), (0,), (9,), (4, 6), (2, 3, 5)]:
            x = sample(shape, dtype, rng, -2, 2)  # few distinct values: ties must keep index order
            for dim in range(max(len(shape), 1)):
                for descending in (False, True):
                    assert check(backend, "argsort", x, dim=dim, descending=descending)
    nans = np.array([3.0, np.nan, 1.0, np.nan, 1.0], np.float32)
    assert check(backend, "argsort", nans, dim=0, descending=False)
    assert check(backend, "argsort", nans, dim=0, descending=True)


# ---- matmul and indexing --------------------------------------------------------------------------

def test_matmul(backend, rng):
    cases = [((2, 3), (3, 4)), ((5, 2, 3), (3, 4)), ((2, 1, 3, 4), (5, 4, 2)), ((0, 3), (3, 2)), ((2, 0), (0, 3)),
             ((33, 17), (17, 140))]
    for dtype in FLOATS + INTS:
        for sa, sb in cases:
            assert check(backend, "matmul", sample(sa, dtype, rng), sample(sb, dtype, rng, transposed=True))


def test_gather_and_index_select(backend, rng):
    for dtype in DTYPES:
        x = sample((4, 5, 3), dtype, rng, transposed=True)
        for dim in range(3):
            size = x.shape[dim]
            index = rng.integers(0, size, (2, 3, 2)).astype(np.int64)
            assert check(backend, "gather", x, index, dim=dim)
            assert check(backend, "index_select", x, rng.integers(0, size, 7).astype(np.int64), dim=dim)
        assert check(backend, "index_select", x, np.zeros(0, np.int64), dim=1)


def test_scatter_and_index_add(backend, rng):
    for dtype in ("f32", "f64", "f16", "i32", "i64"):
        x = sample((4, 5), dtype, rng)
        src = sample((3, 5), dtype, rng)
        for dim in range(2):
            # a plain scatter with repeated targets keeps an unspecified write: targets are unique here
            unique = np.stack([rng.permutation(x.shape[dim])[:3] for _ in range(3)], axis=1 - dim)[:3, :3]
            assert check(backend, "scatter", x, unique.astype(np.int64), src, dim=dim, reduce=None)
            repeated = rng.integers(0, x.shape[dim], (3, 3)).astype(np.int64)
            assert check(backend, "scatter", x, repeated, src, dim=dim, reduce="add")
            index = rng.integers(0, x.shape[dim], 6).astype(np.int64)
            shaped = sample((6, 5) if dim == 0 else (4, 6), dtype, rng)
            assert check(backend, "index_add", x, index, shaped, dim=dim)


def test_index_out_of_bounds_raises(backend):
    x = np.zeros((3, 2), np.float32)
    prim = registry["gather"]
    with pytest.raises(IndexError, match="out of bounds"):
        backend.execute(prim, (x, np.array([[3]], np.int64)), {"dim": 0}, Aval((1, 1), dtype_of("f32")))
    prim = registry["embedding"]
    with pytest.raises(IndexError, match="embedding: index 3 is out of range"):
        backend.execute(prim, (x, np.array([3], np.int64)), {"padding_idx": None, "scale_grad_by_freq": False},
                        Aval((1, 2), dtype_of("f32")))


def test_embedding(backend, rng):
    for dtype in FLOATS:
        weight = sample((10, 4), dtype, rng)
        for shape in [(), (5,), (2, 3), (0, 2)]:
            indices = rng.integers(0, 10, shape).astype(np.int64)
            assert check(backend, "embedding", weight, indices, padding_idx=None, scale_grad_by_freq=False)


# ---- creation ------------------------------------------------------------------------------------

def test_full(backend):
    for dtype in DTYPES + ("u8",):
        for value in (0, 1, 3):
            for shape in [(), (0,), (2, 3)]:
                assert check(backend, "full", shape=shape, value=value, dtype=dtype_of(dtype))
    assert check(backend, "full", shape=(3,), value=-2.5, dtype=dtype_of("bf16"))
    assert check(backend, "full", shape=(3,), value=float("nan"), dtype=dtype_of("f32"))
    assert check(backend, "full", shape=(2,), value=2**40 + 1, dtype=dtype_of("i64"))


def _draw(backend, name, shape, dtype, seed, offset, **params):
    prim = registry[name]
    params = dict(shape=shape, dtype=dtype_of(dtype), seed=seed, offset=offset, **params)
    out = backend.execute(prim, (), params, prim.infer(**params))
    assert out.shape == shape and out.dtype == dtype_of(dtype).np
    return out


@pytest.mark.parametrize("dtype", FLOATS)
def test_uniform_and_normal(backend, dtype):
    u = _draw(backend, "uniform", (20000,), dtype, 3, 0, low=-2.0, high=5.0).astype(np.float64)
    assert u.min() >= -2 and u.max() < 5 and abs(u.mean() - 1.5) < 0.1 and abs(u.var() - 49 / 12) < 0.15
    assert _draw(backend, "uniform", (40000,), dtype, 3, 0, low=0.0, high=1.0).astype(np.float64).max() < 1
    n = _draw(backend, "normal", (20000,), dtype, 3, 0, mean=3.0, std=0.5).astype(np.float64)
    assert abs(n.mean() - 3) < 0.02 and abs(n.std() - 0.5) < 0.02
    assert not backend.fallbacks


def test_random_streams_are_functions_of_seed_and_offset(backend):
    draw = lambda seed, offset: _draw(backend, "uniform", (64,), "f32", seed, offset, low=0.0, high=1.0)  # noqa: E731
    np.testing.assert_array_equal(draw(1, 10), draw(1, 10))
    # The stream hands out non-overlapping offsets: one op of n numbers takes n + 1 counter values.
    assert not np.isin(draw(1, 0), draw(1, 65)).any()
    assert not np.array_equal(draw(1, 0), draw(2, 0))
    # f64 draws carry 53 random bits: 20000 of them do not repeat (24 bits would, by the birthday bound)
    wide = _draw(backend, "uniform", (20000,), "f64", 1, 0, low=0.0, high=1.0)
    assert np.unique(wide).size == wide.size and wide.min() >= 0 and wide.max() < 1
    assert _draw(backend, "uniform", (0,), "f32", 1, 0, low=0.0, high=1.0).shape == (0,)


RANDOM_STREAMS = [(0, 0), (7, 3), (2**40 + 5, 2**32 - 1)]  # the last carries into the counter's high word


def test_random_primitives_draw_the_numpy_backends_numbers(backend):
    """One stream on every backend (ember/random.py): bits, integers and [0, 1) draws are equal, other
    transforms within the dtype's tolerance (a fused multiply-add, libm's log/sin/cos)."""
    for seed, offset in RANDOM_STREAMS:
        for shape in [(), (0,), (7,), (3, 5), (1001,)]:
            for dtype in FLOATS:
                unit = dict(shape=shape, dtype=dtype_of(dtype), seed=seed, offset=offset)
                assert check(backend, "uniform", low=0.0, high=1.0, **unit)
                np.testing.assert_array_equal(_draw(backend, "uniform", shape, dtype, seed, offset, low=0.0, high=1.0),
                                              _draw(NUMPY, "uniform", shape, dtype, seed, offset, low=0.0, high=1.0))
                assert check(backend, "uniform", low=-2.5, high=7.0, **unit)
                assert check(backend, "normal", mean=1.5, std=0.5, **unit)
            for dtype in INTS + ("u8",):
                assert check(backend, "randint", shape=shape, dtype=dtype_of(dtype), low=3, high=90, seed=seed,
                             offset=offset)


def test_uniform_never_reaches_high(backend):
    # 1 - 2**-24 rounds to 1 in f16 and bf16, and low + (high - low) * u can round up to high in f32
    for dtype in ("f16", "bf16", "f32"):
        for low, high in ((0.0, 1.0), (1.0, 1.001), (-3.0, 0.1)):
            u = _draw(backend, "uniform", (50000,), dtype, 11, 0, low=low, high=high).astype(np.float64)
            assert u.max() < high and u.min() >= np.float64(np.asarray(low, dtype_of(dtype).np))


@pytest.mark.parametrize("dtype", INTS + ("u8",))
def test_randint(backend, dtype):
    low, high = (0, 200) if dtype == "u8" else (-50, 70)
    r = _draw(backend, "randint", (5000,), dtype, 5, 0, low=low, high=high)
    assert r.min() == low and r.max() == high - 1 and abs(r.mean() - (low + high - 1) / 2) < 3
    wide = _draw(backend, "randint", (1000,), "i64", 5, 0, low=0, high=2**40)
    assert wide.min() >= 0 and wide.max() < 2**40 and wide.max() > 2**39
    np.testing.assert_array_equal(r, _draw(backend, "randint", (5000,), dtype, 5, 0, low=low, high=high))
    assert not backend.fallbacks


# ---- convolution and pooling ----------------------------------------------------------------------

def test_pool1d_runs_as_2d(backend, rng):
    x = sample((2, 3, 11), "f32", rng)
    x[1, 2, 4] = np.nan
    params = dict(kernel=(3,), stride=(2,), padding=(1,), ceil_mode=True)
    assert check(backend, "max_pool", x, dilation=(2,), **params)
    assert check(backend, "max_pool_indices", x, dilation=(2,), **params)
    assert check(backend, "avg_pool", x, count_include_pad=False, divisor_override=None, **params)


def test_conv2d(backend, rng):
    cases = [((2, 3, 7, 6), (4, 3, 3, 2), dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1)),
             ((1, 4, 9, 9), (6, 2, 3, 3), dict(stride=(2, 1), padding=(1, 2), dilation=(2, 1), groups=2)),
             ((1, 2, 5, 5), (2, 1, 1, 1), dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=2))]
    for dtype in FLOATS:
        for xs, ws, params in cases:
            assert check(backend, "conv", sample(xs, dtype, rng), sample(ws, dtype, rng), **params)


def test_pool2d(backend, rng):
    x = sample((2, 3, 9, 8), "f32", rng)
    x[0, 0, :3, :3] = -np.inf
    x[1, 1, 4, 4] = np.nan
    for params in [dict(kernel=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1), ceil_mode=False),
                   dict(kernel=(3, 2), stride=(2, 3), padding=(1, 1), dilation=(2, 1), ceil_mode=True)]:
        assert check(backend, "max_pool", x, **params)
        assert check(backend, "max_pool_indices", x, **params)
        avg = {k: v for k, v in params.items() if k != "dilation"}
        for count_include_pad in (True, False):
            for divisor_override in (None, 5):
                assert check(backend, "avg_pool", x, count_include_pad=count_include_pad,
                             divisor_override=divisor_override, **avg)


UNFOLD_CASES = [((2, 3, 5, 6), dict(kernel=(2, 3), stride=(1, 2), padding=(1, 0), dilation=(2, 1))),
                ((1, 2, 7), dict(kernel=(3,), stride=(2,), padding=(1,), dilation=(1,))),
                ((1, 2, 4, 3, 5), dict(kernel=(2, 1, 2), stride=(1, 1, 2), padding=(0, 1, 1), dilation=(1, 1, 1))),
                ((0, 2, 4, 4), dict(kernel=(2, 2), stride=(1, 1), padding=(0, 0), dilation=(1, 1)))]


def test_unfold_and_fold(backend, rng):
    for dtype in DTYPES:
        for shape, params in UNFOLD_CASES:
            x = sample(shape, dtype, rng, transposed=False).swapaxes(0, 1).copy().swapaxes(0, 1)  # strided
            assert check(backend, "unfold", x, **params)
            cols = registry["unfold"].reference(x, **params)
            if dtype == "bool":  # fold sums overlapping windows: bools have no sum here
                continue
            cols = sample(cols.shape, dtype, rng)
            if dtype in ("f16", "bf16"):  # the kernel sums halves in f32, the reference in the half type
                prim, fold = registry["fold"], dict(output_size=shape[2:], **params)
                got = backend.execute(prim, (cols,), fold, prim.infer(Aval(cols.shape, dtype_of(dtype)), **fold))
                want = prim.reference(cols.astype(np.float32), **fold).astype(cols.dtype)
                assert_same(got, want, dtype_of(dtype))
            else:
                assert check(backend, "fold", cols, output_size=shape[2:], **params)


def test_conv_and_pool_beyond_2d_fall_back(backend, rng):
    x, w = sample((1, 2, 5, 4, 3), "f32", rng), sample((3, 2, 3, 2, 1), "f32", rng)
    params = dict(stride=(1, 1, 1), padding=(1, 0, 0), dilation=(1, 1, 1), groups=1)
    prim = registry["conv"]
    out = prim.infer(Aval(x.shape, dtype_of("f32")), Aval(w.shape, dtype_of("f32")), **params)
    assert_same(backend.execute(prim, (x, w), params, out), NUMPY.execute(prim, (x, w), params, out), out.dtype)
    assert backend.fallbacks == {"conv"}


# ---- movement ------------------------------------------------------------------------------------

def test_views_share_memory(backend, rng):
    x = sample((4, 6), "f32", rng)
    cases = [("reshape", dict(shape=(2, 12))), ("permute", dict(dims=(1, 0))), ("expand", dict(shape=(3, 4, 6))),
             ("slice", dict(ranges=((1, 4, 2), (0, 6, 3)))), ("flip", dict(dims=(0, 1)))]
    for name, params in cases:
        assert check(backend, name, x, **params)
        out = registry[name].infer(Aval(x.shape, dtype_of("f32")), **params)
        assert np.shares_memory(backend.execute(registry[name], (x,), params, out), x), name


def test_reshape_copies_when_strides_cannot_express_it(backend, rng):
    for dtype in DTYPES:
        x = sample((4, 6), dtype, rng, transposed=True)
        assert check(backend, "reshape", x, shape=(24,))
        assert check(backend, "reshape", x, shape=(2, 2, 6))


def test_copies(backend, rng):
    for dtype in DTYPES:
        a, b = sample((2, 3), dtype, rng), sample((2, 0), dtype, rng)
        assert check(backend, "cat", a, b, sample((2, 1), dtype, rng, transposed=True), dim=1)
        assert check(backend, "pad", a, pads=((1, 0), (2, 1)), value=1)
        v = sample((2, 2), dtype, rng)
        assert check(backend, "slice_assign", sample((4, 4), dtype, rng), v, ranges=((0, 4, 2), (1, 3, 1)))


# ---- the gap ---------------------------------------------------------------------------------------

# Every primitive has a lowering row; these cases of a row still run on the NumPy reference. A change
# to either list (a new primitive without a row, a row that stops covering a case) fails here.
NO_ROW = {"searchsorted", "scatter_reduce", "randperm", "multinomial",  # ember/ops/search.py: no kernels
          "conj", "real", "imag", "complex",  # complex only: rows of backend/cube/complex.py, not of TABLE
          "fft", "rfft"}  # the DFTs, complex results: rows of complex.py (ember/kernels/fft.py)
PARTLY_LOWERED = {
    "pow": lambda rng: ((sample((3, 4), "i32", rng, 1, 3), sample((3, 4), "i32", rng, 0, 3)), {}),
    "left_shift": lambda rng: ((sample((5,), "bool", rng), sample((5,), "bool", rng)), {}),
    "argsort": lambda rng: ((sample((MAX_ROW + 1,), "f32", rng),), dict(dim=0, descending=False)),
    "max_pool": lambda rng: ((sample((1, 2, 4, 5, 3), "f32", rng),),
                             dict(kernel=(2, 2, 1), stride=(2, 2, 1), padding=(0, 0, 0), dilation=(1, 1, 1),
                                  ceil_mode=False)),
}


def test_fallback_report(backend, rng):
    """Print what runs where, and pin the primitives (and cases) still on the NumPy fallback."""
    unlowered = set(registry) - set(TABLE)
    print(f"\ncube(cpu) lowering: {len(TABLE)} primitives have a row")
    print(f"primitives on the NumPy fallback (no row): {sorted(unlowered)}")
    print("partly lowered (fallback for): pow/div/atan2 of ints, shifts of bools, conv and pools over 3 "
          f"spatial dims, argsort rows > {MAX_ROW}")
    assert unlowered == NO_ROW
    assert not set(TABLE) - set(registry), "rows for primitives that do not exist"
    for name, make in PARTLY_LOWERED.items():
        arrays, params = make(rng)
        prim = registry[name]
        out = prim.infer(*(Aval(a.shape, dtype_of(a.dtype)) for a in arrays), **params)
        assert_same(backend.execute(prim, arrays, params, out), NUMPY.execute(prim, arrays, params, out), out.dtype)
    assert backend.fallbacks == set(PARTLY_LOWERED)
