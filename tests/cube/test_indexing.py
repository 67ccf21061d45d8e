"""gather / scatter / index_select / index_add against ember's NumPy references."""

import numpy as np
import pytest

from ember.kernels import indexing as ix
from ember.kernels.common import ROW_CHUNK
from ember.ops.indexing import (_gather_reference, _index_add_reference, _index_select_reference,
                                _scatter_reference)

rng = np.random.default_rng(4)


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(dtype, dim):
    x = (rng.standard_normal((4, 5, 6)) * 10).astype(dtype).transpose(1, 0, 2)  # (5, 4, 6), strided
    shape = list(x.shape)
    shape[dim] = 3
    index = rng.integers(0, x.shape[dim], shape)
    want = _gather_reference(x, index, dim=dim % 3)
    np.testing.assert_array_equal(ix.gather(x, index, dim), want)


@pytest.mark.parametrize("dim", [0, 2])
def test_index_select(dim):
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)[:, ::-1]
    index = np.array([0, 2, 2, 1])
    np.testing.assert_array_equal(ix.index_select(x, index, dim), _index_select_reference(x, index, dim=dim))
    for bad in (7, -1):  # out of range, and negative (refused, as in PyTorch)
        with pytest.raises(IndexError, match="out of bounds"):
            ix.index_select(x, np.array([bad]), dim)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_scatter_add_accumulates_duplicates(dtype):
    x = rng.integers(-5, 5, (4, 5)).astype(dtype)
    index = rng.integers(0, 5, (4, 8))
    src = rng.integers(-5, 5, (4, 8)).astype(dtype)
    want = _scatter_reference(x, index, src, dim=1, reduce="add")
    np.testing.assert_array_equal(ix.scatter(x, index, src, 1, "add"), want)


def test_scatter_assign_with_unique_indices():
    x = rng.standard_normal((6, 3)).astype(np.float64)
    index = np.stack([rng.permutation(6)[:4] for _ in range(3)], 1)
    src = rng.standard_normal((5, 3))
    np.testing.assert_array_equal(ix.scatter(x, index, src, 0), _scatter_reference(x, index, src, dim=0,
                                                                                   reduce=None))


@pytest.mark.parametrize("shape", [(300,), (5, 40), (2, 3, 4, 20), (2, 2, 2, 2, 17), (2, 2 * ROW_CHUNK + 3)])
def test_scatter_along_the_last_dim_runs_row_by_row(shape):
    # `scatter_rows_kernel`: rows of 17..300 (not whole chunks of units) and rows cut in parts, ranks 1..5,
    # a reversed source and a transposed index; unique indices per row, so the result is determined.
    n = shape[-1]
    x = rng.standard_normal(shape).astype(np.float32)
    index = np.ascontiguousarray(np.argsort(rng.random(shape), -1)[..., : n - 1].swapaxes(0, -1)).swapaxes(0, -1)
    src = rng.standard_normal(shape).astype(np.float32)[..., ::-1]
    assert index.shape[-1] >= ix.ROW_MIN
    want = _scatter_reference(x, index, src, dim=len(shape) - 1, reduce=None)
    np.testing.assert_array_equal(ix.scatter(x, index, src, -1), want)
    np.testing.assert_array_equal(ix.scatter(x.astype(np.int64), index, src.astype(np.int64), len(shape) - 1),
                                  want.astype(np.int64))


def test_index_add():
    x = rng.standard_normal((3, 5)).astype(np.float32)
    index = np.array([4, 0, 4, 3])
    src = rng.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(ix.index_add(x, index, src, 1), _index_add_reference(x, index, src, dim=1),
                               rtol=1e-6)


@pytest.mark.parametrize("shape, dim, rows", [((65, 64), 0, 200), ((7, 3, 37), 1, 11), ((2, 9, 5, 19), 1, 4),
                                              ((5, 150), 0, 0), ((4, 16), 0, 9)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_index_add_of_long_slices_runs_a_unit_per_column(shape, dim, rows, dtype):
    """Slices of at least COLUMNS_MIN elements (an embedding's gradient): duplicates accumulate, whole cubes
    of columns and the guarded last one, outer dims, an empty source, integers."""
    x = (rng.standard_normal(shape) * 10).astype(dtype)
    index = rng.integers(0, shape[dim], rows)
    src = (rng.standard_normal(shape[:dim] + (rows,) + shape[dim + 1:]) * 10).astype(dtype)
    assert int(np.prod(shape[dim + 1:])) >= ix.COLUMNS_MIN
    want = _index_add_reference(x, index, src, dim=dim)
    got = ix.index_add(x, index, src, dim)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("shape, dim, rows", [((65, 64), 0, 200), ((7, 3, 37), 1, 11), ((2, 9, 5, 19), 1, 4),
                                              ((5, 150), 0, 0), ((4, 16), 0, 9)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_index_select_of_long_slices_copies_them_whole(shape, dim, rows, dtype):
    """Slices of at least COLUMNS_MIN elements (an embedding lookup): a cube per output slice walking it,
    the last step shifted back; outer dims, no index at all, integers, a transposed input (copied first)."""
    x = (rng.standard_normal(shape) * 10).astype(dtype)
    index = rng.integers(0, shape[dim], rows)
    for view in (x, np.asfortranarray(x)):
        np.testing.assert_array_equal(ix.index_select(view, index, dim), _index_select_reference(x, index, dim=dim))
