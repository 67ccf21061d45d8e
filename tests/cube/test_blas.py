"""The OpenMP-driven OpenBLAS GEMM (runtime/blas.py) against float64 NumPy: layouts, broadcast batches,
empty and degenerate shapes, pieces split over threads; batches summed as they are made
(`matmul_sum`); and that OpenBLAS's own thread setting is left as it was."""

import ctypes

import numpy as np
import pytest

from ember.cube.runtime.blas import host_blas

pytestmark = pytest.mark.skipif(host_blas() is None, reason="NumPy's BLAS here is not an OpenBLAS ember drives")
rng = np.random.default_rng(11)


def check(a: np.ndarray, b: np.ndarray) -> None:
    got = host_blas().matmul(a, b)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert got.shape == want.shape and got.dtype == a.dtype
    tol = 1e-4 if a.dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1, a.shape[-1]))


def normal(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, k, n", [(3, 5, 7), (200, 70, 90), (20, 30, 700), (1, 600, 700), (700, 600, 1),
                                     (900, 1, 900), (0, 300, 900), (900, 0, 400), (400, 900, 0)])
def test_layouts(dtype, m, k, n):
    a, b = normal(m, k, dtype=dtype), normal(k, n, dtype=dtype)
    check(a, b)
    check(np.asfortranarray(a), b)  # a transposed for BLAS
    check(a, np.asfortranarray(b))
    check(np.asfortranarray(a), np.asfortranarray(b))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batches_and_broadcasting(dtype):
    a, b = normal(6, 80, 60, dtype=dtype), normal(6, 60, 70, dtype=dtype)
    check(a, b)                                       # enough matrices for one task each
    check(a[::2], b[::2].transpose(0, 2, 1).copy().transpose(0, 2, 1))  # batch stride, transposed b
    check(np.broadcast_to(a[0], (2, 3, 80, 60)), b[0])  # a batch of one shared matrix
    check(a[:2, None], b[None, :3])                   # (2,1) x (1,3): does not flatten, copied
    check(normal(1, 80, 60, dtype=dtype), normal(5, 60, 90, dtype=dtype))
    check(normal(2, 3, 80, 60, dtype=dtype), b[0])    # one b for consecutive row blocks: one taller product
    check(a[:, :, :50], normal(1, 50, 70, dtype=dtype))  # blocks of a wider matrix (ld 60): folded too
    check(a.transpose(1, 0, 2)[:, :3], b[0])          # blocks not consecutive: kept batched
    rows = normal(3, 9, 3 * 4 * 5, dtype=dtype)  # (B, L, 3 * H * D) rows: heads of q, k, v read in place
    q, k, v = (rows[..., j * 20:(j + 1) * 20].reshape(3, 9, 4, 5).transpose(0, 2, 1, 3) for j in range(3))
    check(q, k.transpose(0, 1, 3, 2))                 # (B, H) batch: two levels of batch strides
    check(normal(3, 4, 9, 9, dtype=dtype), v)
    check(q[:, :, None], normal(2, 5, 7, dtype=dtype))  # (B, H, 2): three levels do not fold, copied


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_many_small_matrices_are_split_over_the_batch(dtype):
    # Each product under OpenBLAS's single-thread size, the batch over it (a conv with one input
    # channel: 16x9 @ 9x784 per sample).
    check(normal(16, 9, dtype=dtype), normal(64, 9, 784, dtype=dtype))
    check(normal(64, 9, 784, dtype=dtype), normal(64, 784, 16, dtype=dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("a_shape, b_shape", [((64, 144, 196), (64, 196, 32)), ((3, 40, 50), (3, 50, 60)),
                                              ((1, 80, 70), (1, 70, 90)), ((5, 9, 784), (5, 784, 16)),
                                              ((7, 30, 20), (20, 40)), ((2, 3, 60, 50), (3, 50, 70)),
                                              ((0, 30, 40), (0, 40, 50)), ((4, 30, 0), (4, 0, 50)),
                                              ((2, 2, 3), (2, 3, 2))])
def test_matmul_sum_adds_the_batch_products(dtype, a_shape, b_shape):
    a, b = normal(*a_shape, dtype=dtype), normal(*b_shape, dtype=dtype)
    got = host_blas().matmul_sum(a, np.swapaxes(np.swapaxes(b, -1, -2).copy(), -1, -2))  # b read transposed
    products = np.matmul(a.astype(np.float64), b.astype(np.float64))
    want = products.sum(tuple(range(products.ndim - 2)))
    assert got.shape == want.shape and got.dtype == a.dtype
    tol = 1e-4 if dtype == np.float32 else 1e-10
    terms = max(1, products.size // max(1, want.size) * a.shape[-1])  # products summed into each output
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * terms ** 0.5)
    with pytest.raises(ValueError, match="needs matrices and a batch"):
        host_blas().matmul_sum(normal(3, 4), normal(4, 5))


def test_views_blas_cannot_take_are_copied():
    x = normal(100, 120)
    check(x[::-1], normal(120, 70))                   # negative stride
    check(x[:, ::2], normal(60, 70))                  # no unit stride
    check(np.broadcast_to(normal(1, 120), (100, 120)), normal(120, 80))  # rows overlap (stride 0)
    check(normal(90, 120), np.broadcast_to(normal(120, 1), (120, 90)))  # columns of stride 0


def test_pieces_cover_every_output():
    # Shapes just over the serial threshold, split by rows and by columns into uneven pieces.
    for m, k, n in [(97, 200, 61), (17, 150, 901), (3, 64, 4097)]:
        check(normal(m, k), normal(k, n))


def test_openblas_thread_setting_is_restored():
    get = ctypes.CFUNCTYPE(ctypes.c_int64 if host_blas().ilp64 else ctypes.c_int)(host_blas().get)
    before = get()
    host_blas().matmul(normal(300, 300), normal(300, 300))
    assert get() == before


def test_small_products_and_other_dtypes_go_to_numpy():
    check(normal(4, 4), normal(4, 4))                 # below OpenBLAS's own single-thread size
    check(normal(1, 1), normal(1, 1))
    a = rng.integers(-5, 5, (4, 6)).astype(np.int32)
    np.testing.assert_array_equal(host_blas().matmul(a, a.T), a @ a.T)
    with pytest.raises(ValueError, match="inner dims"):
        host_blas().matmul(normal(200, 300), normal(400, 200))


def test_summed_matmul_without_the_host_blas(monkeypatch):
    # Another BLAS under NumPy (MKL, Accelerate): the products made by np.matmul and summed after.
    import ember.cube.runtime.blas as blas
    from ember.kernels.matmul import summed_matmul
    a, b = normal(5, 30, 20), normal(5, 20, 40)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64)).sum(0)
    np.testing.assert_allclose(summed_matmul(a, b), want, rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(blas, "host_blas", lambda: None)
    got = summed_matmul(a, b)
    assert got.shape == (30, 40) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
