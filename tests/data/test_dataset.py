"""The Dataset protocol: checked indexing, iteration, the in-memory dataset."""

from __future__ import annotations

import numpy as np
import pytest

from ember.data import Dataset, InMemoryDataset

ITEMS = [f"item{i}" for i in range(10)]


@pytest.fixture
def ds() -> InMemoryDataset[str]:
    return InMemoryDataset(ITEMS)


def test_indexing_matches_list(ds: InMemoryDataset[str]) -> None:
    assert len(ds) == 10
    for i in range(-10, 10):
        assert ds[i] == ITEMS[i]
    assert list(ds) == ITEMS
    assert ds[np.int64(3)] == ITEMS[3]


@pytest.mark.parametrize("index", [10, -11, 100])
def test_out_of_range_names_index_and_length(ds: InMemoryDataset[str], index: int) -> None:
    with pytest.raises(IndexError, match=rf"index {index} out of range for dataset of length 10"):
        ds[index]


def test_non_integer_index_is_type_error(ds: InMemoryDataset[str]) -> None:
    with pytest.raises(TypeError, match="must be an integer, got float"):
        ds[1.0]  # type: ignore[index]


def test_custom_dataset_gets_checked_indexing() -> None:
    class Squares(Dataset[int]):
        def __len__(self) -> int:
            return 5

        def get(self, i: int) -> int:
            assert 0 <= i < 5, "get must only see in-range indices"
            return i * i

    assert Squares()[-2] == 9
    assert Squares().map(lambda x: -x)[-1] == -16
    with pytest.raises(IndexError):
        Squares()[5]
