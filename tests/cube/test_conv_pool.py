"""conv2d (implicit GEMM) and 2-D pooling against direct NumPy loops over the window taps."""

import ml_dtypes
import numpy as np
import pytest

from ember.kernels.conv import conv2d
from ember.kernels import pool
from ember.kernels.pool import avg_pool2d, max_pool2d, max_pool2d_grad, max_pool2d_indices, pool_out_size

rng = np.random.default_rng(5)


def conv_ref(x, w, s, p, d, groups):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    oh = (h + 2 * p[0] - d[0] * (kh - 1) - 1) // s[0] + 1
    ow = (wd + 2 * p[1] - d[1] * (kw - 1) - 1) // s[1] + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * cg:(g + 1) * cg, i * d[0]:i * d[0] + s[0] * (oh - 1) + 1:s[0],
                           j * d[1]:j * d[1] + s[1] * (ow - 1) + 1:s[1]]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, w[g * og:(g + 1) * og, :, i, j])
    return out


CONV_CASES = [((2, 3, 9, 8), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1),
              ((1, 4, 11, 7), (6, 2, 3, 2), (2, 2), (1, 0), (2, 1), 2),
              ((2, 6, 5, 5), (6, 1, 3, 3), (1, 1), (1, 1), (1, 1), 6),
              ((1, 1, 1, 1), (1, 1, 1, 1), (1, 1), (0, 0), (1, 1), 1)]


def test_conv2d(parallel):
    def check(case):
        xs, ws, s, p, d, g = case
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal(ws).astype(np.float32)
        np.testing.assert_allclose(conv2d(x, w, s, p, d, g), conv_ref(x, w, s, p, d, g), rtol=1e-4, atol=1e-4,
                                   err_msg=str(case))

    parallel(check, CONV_CASES)


def test_conv2d_strided_input_and_half_precision():
    x = rng.standard_normal((3, 2, 8, 10)).astype(ml_dtypes.bfloat16).transpose(1, 0, 3, 2)  # (2,3,10,8)
    w = rng.standard_normal((5, 3, 2, 2)).astype(ml_dtypes.bfloat16)
    got = conv2d(x, w, 1, 1).astype(np.float64)
    want = conv_ref(x.astype(np.float64), w.astype(np.float64), (1, 1), (1, 1), (1, 1), 1)
    np.testing.assert_allclose(got, want, rtol=3e-2, atol=5e-2)


def windows(x, k, s, p, d, ceil_mode, fill):
    oh, ow = (pool_out_size(n, kk, ss, pp, dd, ceil_mode) for n, kk, ss, pp, dd in zip(x.shape[2:], k, s, p, d))
    big = np.full(x.shape[:2] + (x.shape[2] + 2 * p[0] + k[0] * s[0], x.shape[3] + 2 * p[1] + k[1] * s[1]),
                  fill, np.float64)
    big[:, :, p[0]:p[0] + x.shape[2], p[1]:p[1] + x.shape[3]] = x
    taps = [big[:, :, i * d[0]:i * d[0] + s[0] * (oh - 1) + 1:s[0], j * d[1]:j * d[1] + s[1] * (ow - 1) + 1:s[1]]
            for i in range(k[0]) for j in range(k[1])]
    return np.stack(taps, -1)


POOL_CASES = [((2, 2), (2, 2), (0, 0), (1, 1), False), ((3, 3), (2, 2), (1, 1), (1, 1), True),
              ((3, 2), (2, 1), (1, 0), (2, 1), False)]


@pytest.fixture(params=["row", "plane"])
def cubes(request, monkeypatch):
    """Each pool test in both forms of the kernels: a cube per output row, and a cube per plane."""
    monkeypatch.setattr(pool, "PLANE_CUBES", 1 if request.param == "plane" else 1 << 30)
    return request.param


@pytest.mark.parametrize("k, s, p, d, ceil_mode", POOL_CASES)
def test_max_pool_and_indices(k, s, p, d, ceil_mode, cubes):
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)[:, :, ::-1]
    taps = windows(x, k, s, p, d, ceil_mode, -np.inf)
    np.testing.assert_array_equal(max_pool2d(x, k, s, p, d, ceil_mode), taps.max(-1))
    index = max_pool2d_indices(x, k, s, p, d, ceil_mode)
    flat = x.reshape(2, 3, -1)
    np.testing.assert_array_equal(np.take_along_axis(flat, index.reshape(2, 3, -1), 2).reshape(index.shape),
                                  taps.max(-1))


@pytest.mark.parametrize("width, k", [(70, (2, 2)), (9, (3, 2)), (5, (1, 1))])
def test_max_pool_nan_and_ties_in_wide_and_narrow_rows(width, k, cubes):
    # Windows inside the input (no padding) of rows wider than a cube (70 // 2 = 35 outputs: the last
    # chunk overlaps the one before) and narrower; ties take the first position, the last NaN wins.
    x = rng.integers(-3, 3, (2, 3, 6, width)).astype(np.float32)
    x[rng.random(x.shape) < 0.05] = np.nan
    taps = windows(x, k, k, (0, 0), (1, 1), False, -np.inf)
    positions = windows(np.arange(x.shape[2] * width, dtype=np.float64).reshape(1, 1, x.shape[2], width)
                        .repeat(2, 0).repeat(3, 1), k, k, (0, 0), (1, 1), False, -1)
    nan = np.isnan(taps)
    last_nan = taps.shape[-1] - 1 - np.argmax(nan[..., ::-1], -1)
    first_max = np.argmax(np.where(nan, -np.inf, taps), -1)
    which = np.where(nan.any(-1), last_nan, first_max)
    want = np.take_along_axis(positions, which[..., None], -1)[..., 0]
    np.testing.assert_array_equal(max_pool2d(x, k), taps.max(-1))
    np.testing.assert_array_equal(max_pool2d_indices(x, k), want.astype(np.int64))


@pytest.mark.parametrize("k, s, p, d, ceil_mode", POOL_CASES[:2])
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool(k, s, p, d, ceil_mode, count_include_pad, cubes):
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float64)
    taps = windows(x, k, s, p, (1, 1), ceil_mode, np.nan)
    inside = ~np.isnan(taps)
    total = np.where(inside, taps, 0).sum(-1)
    if count_include_pad:  # the window clipped to the padded input
        oh, ow = total.shape[2:]
        ys = np.arange(oh) * s[0] - p[0]
        xs = np.arange(ow) * s[1] - p[1]
        hy = np.minimum(ys + k[0], x.shape[2] + p[0]) - ys
        hx = np.minimum(xs + k[1], x.shape[3] + p[1]) - xs
        divisor = hy[:, None] * hx[None, :]
    else:
        divisor = inside.sum(-1)
    np.testing.assert_allclose(avg_pool2d(x, k, s, p, ceil_mode, count_include_pad), total / divisor, rtol=1e-12)
    np.testing.assert_allclose(avg_pool2d(x, k, s, p, ceil_mode, divisor_override=3), total / 3, rtol=1e-12)


@pytest.mark.parametrize("k, s, p, d, ceil_mode", [((2, 2), (2, 2), (0, 0), (1, 1), False),
                                                    ((3, 2), (3, 3), (1, 1), (1, 1), True),
                                                    ((2, 2), (3, 2), (0, 0), (1, 1), True)])
@pytest.mark.parametrize("shape", [(2, 3, 9, 8), (4, 20, 6, 14), (1, 1, 4, 70)])
def test_max_pool_grad_goes_to_each_window_winner(k, s, p, d, ceil_mode, shape, cubes):
    # Ties (small integers) and NaNs: the gradient goes where max_pool2d_indices points, 0 elsewhere.
    x = rng.integers(-3, 3, shape).astype(np.float32)
    x[rng.random(x.shape) < 0.03] = np.nan
    index = max_pool2d_indices(x, k, s, p, d, ceil_mode)
    g = rng.standard_normal(index.shape).astype(np.float32)
    want = np.zeros(x.shape[:2] + (x.shape[2] * x.shape[3],), np.float32)
    np.put_along_axis(want, index.reshape(index.shape[:2] + (-1,)), g.reshape(g.shape[:2] + (-1,)), 2)
    np.testing.assert_array_equal(max_pool2d_grad(x, g, k, s, p, d, ceil_mode), want.reshape(x.shape))


# ---- GEMM convolutions (conv_gemm) and the Cube(cpu) conv rows ------------------------------------

from ember.backend.cube import CubeBackend  # noqa: E402
from ember.cube.runtime.cpu import cpu_runtime  # noqa: E402
from ember.backend.numpy import NumpyBackend  # noqa: E402
from ember.kernels.conv_gemm import conv2d_gemm, conv_transpose2d, conv_weight_grad2d  # noqa: E402
from ember.dtype import dtype_of  # noqa: E402
from ember.errors import DTypeError, ShapeError  # noqa: E402
from ember.ops import registry  # noqa: E402
from ember.ops.primitive import Aval  # noqa: E402

HALF = {np.dtype(np.float16): (1e-2, 5e-2), np.dtype(ml_dtypes.bfloat16): (5e-2, 2e-1)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16])
def test_conv2d_gemm_against_direct_loops(dtype):
    rtol, atol = HALF.get(np.dtype(dtype), (1e-4, 1e-4))
    for xs, ws, s, p, d, g in CONV_CASES:
        x = rng.standard_normal(xs).astype(dtype)
        w = rng.standard_normal(ws).astype(dtype)
        got = conv2d_gemm(x, w, s, p, d, g)
        assert got.dtype == np.dtype(dtype)
        want = conv_ref(x.astype(np.float64), w.astype(np.float64), s, p, d, g)
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=atol, err_msg=str((xs, ws)))


# (x shape, weight shape of conv, stride, padding, dilation, groups)
ADJOINT_CASES = [((2, 3, 9, 8), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1),
                 ((3, 4, 11, 7), (6, 2, 3, 2), (2, 3), (1, 0), (2, 1), 2),
                 ((1, 2, 6, 6), (2, 1, 2, 2), (2, 2), (0, 1), (1, 2), 2),
                 ((2, 2, 12, 40), (3, 2, 6, 5), (1, 1), (2, 3), (1, 1), 1)]  # 30 taps: col2im loops over them


@pytest.mark.parametrize("case", ADJOINT_CASES)
def test_transpose_and_weight_grad_are_adjoints_of_conv(case):
    # <conv(x, w), y> = <x, conv_transpose(y, w)> = <w, conv_weight_grad(x, y)>: an oracle of its own.
    xs, ws, s, p, d, g = case
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    y = conv_ref(x, w, s, p, d, g)
    cot = rng.standard_normal(y.shape)
    extra = tuple(n + 2 * pp - ((o - 1) * ss + dd * (k - 1) + 1)
                  for n, o, k, ss, pp, dd in zip(xs[2:], y.shape[2:], ws[2:], s, p, d))
    dx = conv_transpose2d(cot, w, s, p, extra, d, g)
    dw = conv_weight_grad2d(x, cot, ws[2:], s, p, d, g)
    assert dx.shape == x.shape and dw.shape == w.shape
    np.testing.assert_allclose((x * dx).sum(), (y * cot).sum(), rtol=1e-9)
    np.testing.assert_allclose((w * dw).sum(), (y * cot).sum(), rtol=1e-9)


def run_both(name, *arrays, **params):
    prim = registry[name]
    out = prim.infer(*(Aval(a.shape, dtype_of(a.dtype)) for a in arrays), **params)
    backend = CubeBackend(cpu_runtime())
    got = backend.execute(prim, arrays, params, out)
    want = NumpyBackend().execute(prim, arrays, params, out)
    assert got.shape == want.shape == out.shape and got.dtype == want.dtype
    assert name not in backend.fallbacks, f"{name} ran on the NumPy fallback"
    return got, want


PRIMITIVE_CASES = [  # (x, weight of conv, params): 2-D, 1-D, strided/dilated/grouped, empty batch
    ((2, 4, 9, 8), (6, 2, 3, 2), dict(stride=(2, 1), padding=(1, 2), dilation=(2, 1), groups=2)),
    ((3, 3, 7, 6), (4, 3, 1, 3), dict(stride=(1, 2), padding=(0, 1), dilation=(1, 1), groups=1)),
    ((2, 4, 13), (4, 1, 3), dict(stride=(2,), padding=(1,), dilation=(2,), groups=4)),
    ((0, 2, 5, 5), (2, 2, 3, 3), dict(stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1)),
]


@pytest.mark.parametrize("case, dtype", [(case, dtype) for case in PRIMITIVE_CASES for dtype in ("f32", "f64")]
                         + [(PRIMITIVE_CASES[0], "f16"), (PRIMITIVE_CASES[2], "bf16")])
def test_conv_primitives_on_cube_cpu_match_numpy(case, dtype):
    xs, ws, params = case
    t = dtype_of(dtype).np
    rtol, atol = HALF.get(t, (1e-5, 1e-5))
    x = rng.standard_normal(xs).astype(t)
    w = rng.standard_normal(ws[::-1]).astype(t).T  # a non-contiguous weight
    got, want = run_both("conv", x, w, **params)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)
    y = rng.standard_normal(want.shape).astype(t)
    for extra in {(0,) * len(xs[2:]), tuple(s - 1 for s in params["stride"])}:
        # conv's weight is also the weight of its adjoint conv_transpose (O in, C/groups out per group).
        got, want = run_both("conv_transpose", y, w, output_padding=extra, **params)
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)
    got, want = run_both("conv_weight_grad", x, y, kernel=ws[2:], **params)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol * 4)


def test_conv_gemm_errors_name_the_problem():
    x, w = np.ones((1, 4, 5, 5), np.float32), np.ones((6, 2, 3, 3), np.float32)
    with pytest.raises(ShapeError, match="groups=3"):
        conv2d_gemm(x, w, groups=3)
    with pytest.raises(DTypeError, match="float operands of one dtype"):
        conv2d_gemm(x, w.astype(np.float64), groups=2)
    with pytest.raises(ShapeError, match="does not fit"):
        conv2d_gemm(x, np.ones((6, 4, 7, 7), np.float32))
    with pytest.raises(ShapeError, match="expects 6"):
        conv_transpose2d(x, w)
    with pytest.raises(ShapeError, match="does not fit input"):
        conv_weight_grad2d(x, np.ones((1, 6, 9, 9), np.float32), (3, 3), groups=2)


def test_conv2d_gemm_in_batch_slices(monkeypatch):
    import ember.kernels.conv_gemm as conv_gemm
    monkeypatch.setattr(conv_gemm, "COLUMN_BYTES", 1)  # one sample per im2col buffer
    x, w = rng.standard_normal((3, 4, 6, 5)), rng.standard_normal((2, 4, 3, 3))
    np.testing.assert_allclose(conv2d_gemm(x, w, 1, 1), conv_ref(x, w, (1, 1), (1, 1), (1, 1), 1), rtol=1e-10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_weight_grad_cut_along_its_k_equals_one_gemm(dtype, monkeypatch):
    import ember.kernels.conv_gemm as conv_gemm
    xs, ws, s, p, d, g = ADJOINT_CASES[1]  # strided, dilated, 2 groups
    x = rng.standard_normal((4,) + xs[1:]).astype(dtype)
    for n in (4, 2):  # cut in 4, in 2
        cot = rng.standard_normal(conv_ref(x[:n], rng.standard_normal(ws), s, p, d, g).shape).astype(dtype)
        whole = conv_weight_grad2d(x[:n], cot, ws[2:], s, p, d, g)
        monkeypatch.setattr(conv_gemm, "K_PART_MIN", 1)
        cut = conv_weight_grad2d(x[:n], cot, ws[2:], s, p, d, g)
        monkeypatch.setattr(conv_gemm, "K_PART_MIN", 1 << 30)
        assert cut.dtype == whole.dtype == np.dtype(dtype)
        np.testing.assert_allclose(cut, whole, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-4)
        assert cut.shape == ws


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", [c for c in ADJOINT_CASES if c[-1] == 1], ids=str)
def test_both_weight_grad_strategies_match_the_direct_loops(case, dtype):
    """The autotuner's two ways to a weight gradient (`conv_gemm.weight_grad_tuner`): the batch folded into
    one GEMM, and one GEMM per sample summed; also for a gradient covering only the leading outputs."""
    import ember.kernels.conv_gemm as conv_gemm
    xs, ws, s, p, d, _ = case
    x = rng.standard_normal(xs).astype(dtype)
    full = conv_ref(x, rng.standard_normal(ws), s, p, d, 1).shape[2:]
    for out in (full, (full[0] - 1, full[1])):
        cot = rng.standard_normal(xs[:1] + ws[:1] + out).astype(dtype)
        padded = np.zeros(xs[:1] + ws[:1] + full, dtype)
        padded[:, :, :out[0], :out[1]] = cot
        # <w, dW> = <conv(x, w), cot> for every w: dW's entries are the gradients of that bilinear form
        want = np.stack([(conv_ref(x.astype(np.float64), np.eye(np.prod(ws))[i].reshape(ws), s, p, d, 1)
                          * padded).sum() for i in range(np.prod(ws))]).reshape(ws)
        geometry = (ws[2:], s, p, d, out)
        for strategy in (conv_gemm._weight_grad_folded, conv_gemm._weight_grad_per_sample):
            got = strategy(x, cot, geometry)
            assert got.shape == ws and got.dtype == np.dtype(dtype)
            np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == np.float32 else 1e-10, atol=1e-4,
                                       err_msg=strategy.__name__)


# Unit strides, many planes: col2im reads whole rows of patches inside a launch and tests columns in its
# first and last planes (`col2im_kernel`).
COL2IM_CASES = [((16, 16, 14, 14), (32, 16, 3, 3), (1, 1), (1, 1), (1, 1), 1),  # rows of 14: a masked tail
                ((8, 5, 9, 13), (6, 5, 3, 3), (1, 1), (2, 2), (2, 2), 1),       # dilated
                ((2, 3, 5, 150), (4, 3, 3, 3), (1, 1), (1, 0), (1, 1), 1),      # rows wider than the units
                ((4, 8, 7, 16), (8, 8, 5, 4), (1, 1), (2, 1), (1, 1), 1),       # 20 taps, looped over
                ((5, 2, 6, 6), (3, 2, 1, 1), (1, 1), (0, 0), (1, 1), 1)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", [c for c in ADJOINT_CASES if c[-1] == 1] + COL2IM_CASES, ids=str)
def test_both_transpose_strategies_match_numpy(case, dtype):
    """The autotuner's two layouts of conv_transpose2d's patches (`conv_gemm.transpose_tuner`): channel first
    (one GEMM over the batch) and batch first (a GEMM per sample), each against the NumPy reference, with
    strides, padding, dilation and an output padding; with unit strides col2im's whole-row reads and its
    tested columns (`COL2IM_CASES`)."""
    import ember.kernels.conv_gemm as conv_gemm
    xs, ws, s, p, d, _ = case
    w = rng.standard_normal(ws).astype(dtype)
    y = conv_ref(rng.standard_normal(xs), w, s, p, d, 1)
    cot = rng.standard_normal(y.shape).astype(dtype)
    extra = tuple(n + 2 * pp - ((o - 1) * ss + dd * (k - 1) + 1)
                  for n, o, k, ss, pp, dd in zip(xs[2:], y.shape[2:], ws[2:], s, p, d))
    params = dict(stride=s, padding=p, output_padding=extra, dilation=d, groups=1)
    prim = registry["conv_transpose"]
    want = NumpyBackend().execute(prim, [cot, w], params, prim.infer(Aval(cot.shape, dtype_of(cot.dtype)),
                                                                     Aval(w.shape, dtype_of(w.dtype)), **params))
    plan = (1, s, p, d, xs[2:])
    for strategy in (conv_gemm._transpose_channel_first, conv_gemm._transpose_batch_first):
        got = strategy(cot, w, plan)
        assert got.shape == xs and got.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == np.float32 else 1e-10, atol=1e-4,
                                   err_msg=strategy.__name__)


def test_the_weight_grad_reads_the_columns_conv2d_made_of_a_live_input(monkeypatch):
    """conv2d keeps the batch-first columns of its host input while that input lives (bounded by
    KEPT_COLUMN_BYTES, oldest dropped first); the per-sample weight gradient of the same input and geometry
    reads them instead of making them again, and gets what it gets from fresh columns."""
    import gc
    import ember.kernels.conv_gemm as conv_gemm
    made = []
    im2col = conv_gemm.im2col
    monkeypatch.setattr(conv_gemm, "im2col", lambda x, *a, **k: made.append(x.shape) or im2col(x, *a, **k))
    x, w = rng.standard_normal((4, 3, 9, 8)).astype(np.float32), rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    y = conv2d_gemm(x, w, 1, 1)
    cot = rng.standard_normal(y.shape).astype(np.float32)
    geometry = ((3, 3), 1, 1, 1, y.shape[2:])
    assert made == [x.shape]
    kept = conv_gemm._weight_grad_per_sample(x, cot, geometry)
    assert made == [x.shape], "the forward's columns were read"
    np.testing.assert_allclose(kept, conv_gemm._weight_grad_folded(x, cot, geometry), rtol=1e-4, atol=1e-4)
    conv_gemm._weight_grad_per_sample(x, cot[:, :, ::2, ::2], ((3, 3), 2, 1, 1, (5, 4)))  # another geometry: made again
    assert len(made) == 3  # (the folded one made its own too)
    copy = x.copy()  # equal values, another array: not its columns
    conv_gemm._weight_grad_per_sample(copy, cot, geometry)
    assert len(made) == 4
    del x, copy
    gc.collect()
    assert not conv_gemm._kept, "the columns went with their input"
    monkeypatch.setattr(conv_gemm, "KEPT_COLUMN_BYTES", 2 * 4 * 27 * 72 * 4)  # room for two inputs' columns
    inputs = [rng.standard_normal((4, 3, 9, 8)).astype(np.float32) for _ in range(3)]
    for a in inputs:
        conv2d_gemm(a, w, 1, 1)
    assert [entry[0]() for entry in conv_gemm._kept.values()] == inputs[1:], "the oldest dropped"
