"""conv2d (implicit GEMM) and 2-D pooling against direct NumPy loops over the window taps."""

import ml_dtypes
import numpy as np
import pytest

from ember.cube.kernels.conv import conv2d
from ember.cube.kernels.pool import avg_pool2d, max_pool2d, max_pool2d_indices, pool_out_size

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


@pytest.mark.parametrize("k, s, p, d, ceil_mode", POOL_CASES)
def test_max_pool_and_indices(k, s, p, d, ceil_mode):
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)[:, :, ::-1]
    taps = windows(x, k, s, p, d, ceil_mode, -np.inf)
    np.testing.assert_array_equal(max_pool2d(x, k, s, p, d, ceil_mode), taps.max(-1))
    index = max_pool2d_indices(x, k, s, p, d, ceil_mode)
    flat = x.reshape(2, 3, -1)
    np.testing.assert_array_equal(np.take_along_axis(flat, index.reshape(2, 3, -1), 2).reshape(index.shape),
                                  taps.max(-1))


@pytest.mark.parametrize("k, s, p, d, ceil_mode", POOL_CASES[:2])
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool(k, s, p, d, ceil_mode, count_include_pad):
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
