"""Batched matmul against NumPy: shapes, broadcasting, transposed views, dtypes."""

import ml_dtypes
import numpy as np
import pytest

from ember.cube.kernels.matmul import matmul
from ember.errors import DTypeError, ShapeError

rng = np.random.default_rng(3)

SHAPES = [((5, 7), (7, 9)), ((1, 1), (1, 1)), ((3, 1, 70, 33), (4, 33, 65)), ((7,), (7, 3)),
          ((2, 5), (5,)), ((130, 17), (17, 200)), ((2, 3, 0), (0, 4)), ((0, 3), (3, 2))]


def test_shapes_and_broadcasting(parallel):
    def check(shapes):
        a = rng.standard_normal(shapes[0]).astype(np.float32)
        b = rng.standard_normal(shapes[1]).astype(np.float32)
        got, want = matmul(a, b), a @ b
        assert got.shape == want.shape, shapes
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str(shapes))

    parallel(check, SHAPES)


def test_transposed_and_strided_views_need_no_copy():
    a = rng.standard_normal((40, 30)).astype(np.float64)
    b = rng.standard_normal((50, 80)).astype(np.float64)
    c = rng.standard_normal((25, 40)).astype(np.float64)
    for left, right in [(a.T, b[:40, ::2]), (a.T, c.T), (a.T, a[::-1])]:
        np.testing.assert_allclose(matmul(left, right), left @ right, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype, tol", [(np.float16, 2e-2), (ml_dtypes.bfloat16, 5e-2), (np.int32, 0)])
def test_dtypes(dtype, tol):
    a = rng.integers(-4, 4, (9, 12)).astype(dtype)
    b = rng.integers(-4, 4, (12, 10)).astype(dtype)
    want = a.astype(np.float64) @ b.astype(np.float64)
    got = matmul(a, b)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


def test_errors():
    with pytest.raises(ShapeError, match="inner"):
        matmul(np.ones((2, 3)), np.ones((4, 2)))
    with pytest.raises(ShapeError, match="batch"):
        matmul(np.ones((2, 2, 3)), np.ones((3, 3, 2)))
    with pytest.raises(DTypeError):
        matmul(np.ones((2, 2), np.float32), np.ones((2, 2)))
