"""Bitonic sort / topk against NumPy's stable sort."""

import numpy as np
import pytest

from ember.kernels.sort import sort, topk
from ember.errors import ShapeError

rng = np.random.default_rng(6)


@pytest.mark.parametrize("shape, dim", [((5, 37), -1), ((6, 4, 3), 0), ((1,), 0), ((3, 0), 1)])
def test_sort_matches_stable_argsort(shape, dim):
    x = rng.standard_normal(shape).astype(np.float32)
    values, index = sort(x, dim)
    np.testing.assert_array_equal(values, np.sort(x, dim))
    np.testing.assert_array_equal(index, np.argsort(x, dim, kind="stable"))
    values, index = sort(x, dim, descending=True)
    np.testing.assert_array_equal(index, np.argsort(-x, dim, kind="stable"))


def test_ties_keep_their_order_and_nan_sorts_last():
    x = rng.integers(0, 4, (3, 50)).astype(np.int64)
    values, index = sort(x)
    np.testing.assert_array_equal(index, np.argsort(x, -1, kind="stable"))
    y = np.array([3, np.nan, 1, 2, np.nan], np.float32)
    values, index = sort(y)
    np.testing.assert_array_equal(index, [2, 3, 0, 1, 4])


@pytest.mark.parametrize("largest", [True, False])
def test_topk(largest):
    x = rng.standard_normal((4, 60))
    values, index = topk(x, 7, largest=largest)
    order = np.argsort(-x if largest else x, -1, kind="stable")[:, :7]
    np.testing.assert_array_equal(index, order)
    np.testing.assert_array_equal(values, np.take_along_axis(x, order, -1))
    with pytest.raises(ShapeError):
        topk(x, 61)
