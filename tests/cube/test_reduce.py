"""Reductions, softmax and norms against NumPy on random inputs of several layouts and dtypes."""

import ml_dtypes
import numpy as np
import pytest

from ember.kernels.norm import layer_norm, norm_grad, rms_norm
from ember.kernels.reduce import reduce
from ember.kernels.scan import scan
from ember.kernels.softmax import softmax, softmax_grad
from ember.errors import DTypeError, ShapeError

rng = np.random.default_rng(2)

REF = {
    "sum": np.sum, "mean": np.mean, "prod": np.prod, "amax": np.max, "amin": np.min,
    "var": lambda x, axis, keepdims=False: np.var(x, axis=axis, ddof=1, keepdims=keepdims),
    "argmax": np.argmax, "argmin": np.argmin,
}
# (input, dims): trailing dims of a dense array (fast path), leading/middle dims, a transposed view
X = rng.standard_normal((4, 5, 6)).astype(np.float32)
LAYOUTS = [(X, (2,)), (X, (0, 2)), (X.transpose(2, 0, 1)[:, ::2], (1,))]


def test_every_reduction_on_every_layout(parallel):
    cases = [(op, i) for op in REF for i in range(len(LAYOUTS))]

    def check(case):
        op, i = case
        x, dims = LAYOUTS[i]
        if op.startswith("arg"):
            dims = dims[0]
        x = x * 0.5 + 1 if op == "prod" else x
        got = reduce(op, x, dims)
        want = REF[op](x.astype(np.float64), axis=dims)
        assert got.shape == want.shape, case
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=str(case))

    parallel(check, cases)


def test_keepdim_all_dims_and_long_rows():
    x = rng.standard_normal((3, 1000)).astype(np.float32)
    np.testing.assert_allclose(reduce("sum", x, None), x.sum(), rtol=1e-4)
    np.testing.assert_allclose(reduce("amax", x, 1, keepdim=True), x.max(1, keepdims=True))
    assert reduce("argmax", x) == np.argmax(x)


def test_long_reductions_are_split_over_cubes(parallel):
    x = rng.standard_normal((2, 70_000)).astype(np.float32)

    def check(case):
        op, view, dims = case
        want = REF[op](view.astype(np.float64), axis=dims)
        np.testing.assert_allclose(reduce(op, view, dims), want, rtol=1e-4, atol=1e-4, err_msg=op)

    parallel(check, [("sum", x, 1), ("mean", x, None), ("amax", x.T, 0), ("amin", x[:, ::-1], 1)])


def test_integer_and_half_dtypes(parallel):
    ints = rng.integers(-50, 50, (7, 9)).astype(np.int32)
    halves = rng.standard_normal((7, 9)).astype(np.float16)
    brains = rng.standard_normal((7, 9)).astype(ml_dtypes.bfloat16)

    def check(case):
        op, x = case
        got = reduce(op, x, 1)
        want = REF[op](x.astype(np.float64) if x.dtype.kind != "i" else x, axis=1)
        if op == "sum" and x.dtype.kind == "i":
            assert got.dtype == np.int64
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-2, atol=1e-2)

    parallel(check, [("sum", ints), ("amax", ints), ("argmin", ints), ("sum", halves), ("mean", brains)])


def test_strided_reductions_one_unit_per_output(parallel):
    """The columns shape: a bias gradient (a transposed view reduced over its contiguous-output axis),
    widths with whole cubes and a tail (the C target's two launches), a strided output axis, and two
    reduced dims that do not merge."""
    x = rng.standard_normal((37, 300)).astype(np.float32)
    x[3, 7] = np.nan
    cases = [("sum", np.ascontiguousarray(x.T).T, 0), ("amax", x, 0), ("amin", x, 0), ("argmin", x, 0),
             ("argmax", x[::-1, ::2], 0), ("var", x, 0), ("mean", x[:, 1:], 0), ("prod", x * 0.1 + 1, 0),
             ("sum", rng.standard_normal((6, 5, 40)).astype(np.float32), (0, 2)),
             ("sum", rng.integers(-9, 9, (33, 70)).astype(np.int16), 0),
             ("amax", rng.standard_normal((9, 70)).astype(np.float16), 0),
             ("sum", x[:, :64], 0), ("amin", x[:, :33], 0)]  # C target: two cubes of 32; one and a tail

    def check(case):
        op, v, dims = case
        got = reduce(op, v, dims)
        want = REF[op](v.astype(np.float64), axis=dims)
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-3, atol=1e-3, err_msg=op)

    parallel(check, cases)


def test_rows_of_several_runs(parallel):
    """Reduced dims that do not merge but end in a contiguous run (a conv bias gradient over (N, HW)):
    rows of several runs, split over cubes by runs when the rows are few and long."""
    small = rng.standard_normal((5, 3, 70)).astype(np.float32)
    small[2, 1, 9] = np.nan
    big = rng.standard_normal((64, 4, 4096)).astype(np.float32)
    cases = [(op, small, (0, 2)) for op in ("sum", "mean", "amax", "amin", "var", "prod")]
    cases += [("sum", big, (0, 2)), ("amax", big.transpose(1, 0, 2), (1, 2))]

    def check(case):
        op, v, dims = case
        v = v * 0.1 + 1 if op == "prod" else v
        np.testing.assert_allclose(reduce(op, v, dims), REF[op](v.astype(np.float64), axis=dims), rtol=1e-4,
                                   atol=1e-3, err_msg=op)

    parallel(check, cases)


def test_nan_propagates_through_vector_rows():
    x = rng.standard_normal((3, 100)).astype(np.float32)
    x[1, 37], x[2, 99] = np.nan, np.inf
    for op in ("amax", "amin"):
        np.testing.assert_array_equal(reduce(op, x, 1), REF[op](x, axis=1))


def test_ties_go_to_the_first_index_and_nan_wins():
    x = np.array([[1, 3, 3, 0], [2, 2, 2, 2]], np.float32)
    np.testing.assert_array_equal(reduce("argmax", x, 1), [1, 0])
    y = np.array([1.0, np.nan, 5.0, np.nan], np.float32)
    assert reduce("argmax", y, 0) == 1 and np.isnan(reduce("amax", y, 0))


def test_empty_and_scalar_inputs():
    assert reduce("sum", np.zeros((3, 0), np.float32), 1).tolist() == [0, 0, 0]
    assert reduce("prod", np.zeros((0,), np.float32), 0) == 1
    assert reduce("sum", np.zeros((0, 4), np.float32), 0).shape == (4,)
    assert reduce("sum", np.float32(2.5)) == 2.5
    with pytest.raises(ShapeError):
        reduce("amax", np.zeros((3, 0)), 1)
    with pytest.raises(DTypeError):
        reduce("mean", np.arange(3), 0)


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (2, 3, 300)])
def test_softmax_and_log_softmax(shape):
    x = (rng.standard_normal(shape) * 5).astype(np.float32)
    e = np.exp(x - x.max(-1, keepdims=True))
    ref = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(softmax(x), ref, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(softmax(x, log=True), np.log(ref), rtol=1e-5, atol=1e-5)


def test_softmax_half_and_noncontiguous():
    x = rng.standard_normal((8, 5)).astype(np.float16).T
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    np.testing.assert_allclose(softmax(x).astype(np.float64), e / e.sum(-1, keepdims=True), atol=2e-3)


@pytest.mark.parametrize("affine, n", [(True, 33), (False, 33), (True, 600)])  # 600: whole strides + a tail
def test_layer_norm_and_rms_norm(affine, n):
    x = rng.standard_normal((5, 3, n)).astype(np.float64)
    w = rng.standard_normal(n) if affine else None
    b = rng.standard_normal(n) if affine else None
    ln = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    rn = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-6)
    if affine:
        ln, rn = ln * w + b, rn * w
    np.testing.assert_allclose(layer_norm(x, w, b), ln, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(rms_norm(x, w), rn, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("n", [1, 33, 257, 8192, 8193])  # 8192: the whole row held (full); 8193: three passes
def test_row_resident_kernels_of_gpu_targets(monkeypatch, n):
    """The GPU targets' single-read softmax and norms (`reduce.resident_shape`), run on the C target with
    its shared-memory cube reductions (a WGSL-shaped launch): any row length, halves, with and without
    the affine map; rows over 8192 take the three-pass kernels."""
    import importlib
    for name in ("softmax", "norm"):
        monkeypatch.setattr(importlib.import_module(f"ember.kernels.{name}"), "launch_target", lambda x: "wgsl")
    x = (rng.standard_normal((3, n)) * 4 + 1).astype(np.float32)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    np.testing.assert_allclose(softmax(x), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(softmax(x, log=True), np.log(e / e.sum(-1, keepdims=True)), rtol=1e-5, atol=2e-5)
    w, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    centred = x64 - x64.mean(-1, keepdims=True)
    ln = centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(layer_norm(x, w, b), ln * w + b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(rms_norm(x), x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6), rtol=1e-4,
                               atol=1e-5)
    if n == 257:
        half = x.astype(np.float16)
        h64 = half.astype(np.float64)
        e = np.exp(h64 - h64.max(-1, keepdims=True))
        got = softmax(half)
        assert got.dtype == np.float16
        np.testing.assert_allclose(got.astype(np.float64), e / e.sum(-1, keepdims=True), atol=1e-3)
        assert layer_norm(np.zeros((0, n), np.float16)).shape == (0, n)


@pytest.mark.parametrize("shape", [(3, 1), (4, 3, 300), (2, 8192), (0, 5)])
def test_softmax_and_norm_gradients_of_held_rows(shape):
    """`softmax_grad` and `norm_grad` (the GPU ops' backward kernels) against the formulas in f64, on the
    C target; `norm_grad` packs the input's gradient rows, then the weight's and the bias's."""
    x, g = rng.standard_normal(shape) * 3 + 1, rng.standard_normal(shape)
    n = shape[-1]
    for log in (False, True):
        y = softmax(x, log)
        want = g - np.exp(y) * g.sum(-1, keepdims=True) if log else y * (g - (g * y).sum(-1, keepdims=True))
        np.testing.assert_allclose(softmax_grad(y, g, log), want, rtol=1e-9, atol=1e-12)
    w = rng.standard_normal(n)
    for rms in (False, True):
        d = x if rms else x - x.mean(-1, keepdims=True)
        inv = 1 / np.sqrt((d * d).mean(-1, keepdims=True) + 1e-5)
        xhat, gw = d * inv, g * w
        dx = gw - xhat * (gw * xhat).mean(-1, keepdims=True) - (0 if rms else gw.mean(-1, keepdims=True))
        packed = norm_grad(x, w, g, 1e-5, rms)
        rows = x.size // n
        assert packed.shape == (rows + 2, n)
        np.testing.assert_allclose(packed[:rows].reshape(shape), dx * inv, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(packed[rows], (g * xhat).reshape(-1, n).sum(0), rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(packed[rows + 1], g.reshape(-1, n).sum(0), rtol=1e-9, atol=1e-9)
    with pytest.raises(ShapeError, match="longer"):
        softmax_grad(np.zeros((1, 8193)), np.zeros((1, 8193)))
    with pytest.raises(ShapeError, match=r"one shape, got \(2, 3\) and \(3, 2\)"):
        softmax_grad(np.zeros((2, 3)), np.zeros((3, 2)))
    with pytest.raises(DTypeError, match="float64 and float32"):
        softmax_grad(np.zeros((2, 3)), np.zeros((2, 3), np.float32))
    with pytest.raises(ShapeError, match=r"layer_norm_grad: .* got \(2, 3\) and \(2, 4\)"):
        norm_grad(np.zeros((2, 3)), None, np.zeros((2, 4)), 1e-5, False)
    with pytest.raises(DTypeError, match="rms_norm_grad .* float dtype"):
        norm_grad(np.zeros((2, 3), np.int32), None, np.zeros((2, 3), np.int32), 1e-5, True)


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16])
def test_scans(op, dtype):
    x = rng.uniform(0.5, 1.5, (4, 7, 5)).astype(dtype) if dtype != np.int32 else rng.integers(-3, 4, (4, 7, 5)).astype(dtype)
    ref = np.cumsum if op == "cumsum" else np.cumprod
    for dim, view in [(1, x), (0, x[:, ::-2].transpose(2, 1, 0))]:
        want = ref(view.astype(np.float32) if dtype == np.float16 else view, axis=dim).astype(dtype)
        got = scan(op, view, dim)
        assert got.dtype == np.dtype(dtype) and got.shape == view.shape
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=2e-3)


def test_norm_rejects_mismatched_weight():
    with pytest.raises(ShapeError, match="weight"):
        layer_norm(np.zeros((2, 4), np.float32), np.ones(3, np.float32))
