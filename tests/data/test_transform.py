"""Every transform, as method and as function, checked against plain-Python list operations."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest

from ember.data import Dataset, InMemoryDataset
from ember.data import transform as T

ITEMS = [f"item{i}" for i in range(10)]


@pytest.fixture
def ds() -> InMemoryDataset[str]:
    return InMemoryDataset(ITEMS)


def test_map(ds: InMemoryDataset[str]) -> None:
    assert list(ds.map(str.upper)) == [s.upper() for s in ITEMS]
    assert list(T.map(ds, len)) == [len(s) for s in ITEMS]
    with pytest.raises(TypeError, match="callable"):
        ds.map(3)  # type: ignore[arg-type]


def test_shuffled_is_a_seeded_permutation(ds: InMemoryDataset[str]) -> None:
    a, b, c = ds.shuffled(seed=1), T.shuffled(ds, 1), ds.shuffled(seed=2)
    assert list(a) == list(b)
    assert sorted(a) == sorted(ITEMS)
    assert list(a) != list(c)
    assert list(a) == [ITEMS[i] for i in np.random.default_rng(1).permutation(10)]


@pytest.mark.parametrize("start,end", [(0, 10), (2, 7), (5, 5), (0, 0), (9, 10)])
def test_partial_is_slice(ds: InMemoryDataset[str], start: int, end: int) -> None:
    assert list(ds.partial(start, end)) == ITEMS[start:end]
    assert list(T.partial(ds, start, end)) == ITEMS[start:end]


@pytest.mark.parametrize("start,end", [(-1, 3), (4, 2), (0, 11)])
def test_partial_rejects_bad_bounds(ds: InMemoryDataset[str], start: int, end: int) -> None:
    with pytest.raises(ValueError, match="0 <= start <= end <= 10"):
        ds.partial(start, end)


def test_select(ds: InMemoryDataset[str]) -> None:
    idx = [3, -1, 3, 0]
    assert list(ds.select(idx)) == [ITEMS[i] for i in idx]
    assert list(T.select(ds, np.array([9, 8]))) == [ITEMS[9], ITEMS[8]]
    assert list(ds.select([])) == []
    with pytest.raises(IndexError, match="index 10 out of range for dataset of length 10"):
        ds.select([1, 10])
    with pytest.raises(TypeError, match="1-D sequence of integers"):
        ds.select([0.5])


@pytest.mark.parametrize("size", [1, 3, 10, 11])
def test_windows(ds: InMemoryDataset[str], size: int) -> None:
    expected = [ITEMS[i:i + size] for i in range(len(ITEMS) - size + 1)]
    assert list(ds.windows(size)) == expected
    assert list(T.windows(ds, size)) == expected


def test_windows_rejects_bad_size(ds: InMemoryDataset[str]) -> None:
    with pytest.raises(ValueError, match="positive integer"):
        ds.windows(0)


def test_compose_is_concatenation(ds: InMemoryDataset[str]) -> None:
    other, empty = InMemoryDataset(["x", "y"]), InMemoryDataset([])
    joined = ds.compose(empty, other, ds)
    expected = ITEMS + [] + ["x", "y"] + ITEMS
    assert len(joined) == len(expected)
    assert [joined[i] for i in range(-len(expected), len(expected))] == expected + expected
    assert list(T.compose()) == []
    with pytest.raises(TypeError, match="compose takes datasets"):
        T.compose(ds, ["a"])  # type: ignore[arg-type]


def test_sampler_with_replacement(ds: InMemoryDataset[str]) -> None:
    s = ds.sampler(25, replace=True, seed=4)
    assert list(s) == [ITEMS[i] for i in np.random.default_rng(4).integers(0, 10, size=25)]
    assert list(s) == list(T.sampler(ds, 25, replace=True, seed=4))


def test_sampler_without_replacement_covers_each_pass(ds: InMemoryDataset[str]) -> None:
    s = list(ds.sampler(25, replace=False, seed=3))
    assert len(s) == 25
    assert sorted(s[:10]) == sorted(ITEMS) and sorted(s[10:20]) == sorted(ITEMS)
    assert len(set(s[20:])) == 5
    assert list(ds.sampler(0)) == []
    with pytest.raises(ValueError, match="empty dataset"):
        InMemoryDataset([]).sampler(1)
    with pytest.raises(ValueError, match="non-negative integer"):
        ds.sampler(-1)


def test_transforms_chain_and_pickle(ds: InMemoryDataset[str]) -> None:
    chained = ds.partial(1, 9).shuffled(seed=0).select([0, 1, 2, 3]).windows(2).map(tuple)
    rng_order = [ITEMS[1:9][i] for i in np.random.default_rng(0).permutation(8)][:4]
    assert list(chained) == [tuple(rng_order[i:i + 2]) for i in range(3)]
    assert list(pickle.loads(pickle.dumps(chained))) == list(chained)


def test_random_chains_against_python_model() -> None:
    rnd = random.Random(0)
    for _ in range(50):
        items = list(range(rnd.randint(0, 12)))
        ds: Dataset[int] = InMemoryDataset(items)
        model = list(items)
        for _ in range(3):
            if model and rnd.random() < 0.5:
                a = rnd.randint(0, len(model))
                b = rnd.randint(a, len(model))
                ds, model = ds.partial(a, b), model[a:b]
            else:
                ds, model = ds.compose(InMemoryDataset([-1])), model + [-1]
        assert list(ds) == model


def _tag(item: str, rng: np.random.Generator) -> tuple[str, int]:
    return item, int(rng.integers(0, 1_000_000))


def test_map_random_uses_seed_epoch_and_index(ds: InMemoryDataset[str]) -> None:
    noisy = ds.map_random(_tag, seed=9)
    assert list(noisy) == [(s, int(np.random.default_rng([9, 0, i]).integers(0, 1_000_000)))
                           for i, s in enumerate(ITEMS)]
    assert list(noisy) == list(T.map_random(ds, _tag, seed=9)), "same on every access"
    noisy.set_epoch(2)
    assert noisy[3] == _tag(ITEMS[3], np.random.default_rng([9, 2, 3]))
    with pytest.raises(TypeError, match="callable"):
        ds.map_random(None, seed=0)  # type: ignore[arg-type]


def test_set_epoch_reaches_through_wrappers(ds: InMemoryDataset[str]) -> None:
    a, b = ds.map_random(_tag, seed=1), ds.map_random(_tag, seed=2)
    outer = a.shuffled(seed=0).compose(b.windows(2)).select([0, 1]).map(str)
    outer.set_epoch(5)
    assert a.epoch == 5 and b.epoch == 5
