"""Dataset transforms: each wraps a dataset and reads through to it on access, copying no items.

Each is a function here and a method on `Dataset` (`ds.map(fn)` is `map(ds, fn)`). Random
transforms draw their whole index table from `np.random.default_rng(seed)` once, so the result is
a pure function of the seed and safe to rebuild in worker processes; `map_random` derives a
generator per item from (seed, epoch, index) for the same reason.

Example:
    >>> from ember.data import InMemoryDataset
    >>> ds = InMemoryDataset(list(range(6)))
    >>> list(windows(partial(ds, 1, 5), 2))
    [[1, 2], [2, 3], [3, 4]]
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from .dataset import Dataset

T = TypeVar("T")
U = TypeVar("U")


class MappedDataset(Dataset[U]):
    """`fn(item)` for every item of `dataset`, computed on access. Example: `MappedDataset(ds, str)`."""

    def __init__(self, dataset: Dataset[T], fn: Callable[[T], U]) -> None:
        if not callable(fn):
            raise TypeError(f"map needs a callable, got {type(fn).__name__}")
        self.dataset = dataset
        self.fn = fn

    def __len__(self) -> int:
        return len(self.dataset)

    def wrapped(self) -> Sequence[Dataset[Any]]:
        return (self.dataset,)

    def get(self, i: int) -> U:
        return self.fn(self.dataset.get(i))


class RandomMappedDataset(Dataset[U]):
    """`fn(item, rng)` where item `i` of epoch `e` gets `rng = np.random.default_rng([seed, e, i])`.

    The generator depends only on (seed, epoch, index), so an augmented item is the same whichever
    process builds it and in whatever order, and differs from one epoch to the next.

    Example:
        >>> from ember.data import InMemoryDataset
        >>> noisy = RandomMappedDataset(InMemoryDataset([0.0]), lambda x, rng: x + rng.random(), seed=1)
        >>> noisy[0] == noisy[0]
        True
    """

    def __init__(self, dataset: Dataset[T], fn: Callable[[T, np.random.Generator], U], seed: int) -> None:
        if not callable(fn):
            raise TypeError(f"map_random needs a callable, got {type(fn).__name__}")
        self.dataset = dataset
        self.fn = fn
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        super().set_epoch(epoch)

    def wrapped(self) -> Sequence[Dataset[Any]]:
        return (self.dataset,)

    def __len__(self) -> int:
        return len(self.dataset)

    def get(self, i: int) -> U:
        return self.fn(self.dataset.get(i), np.random.default_rng([self.seed, self.epoch, i]))


class IndexedDataset(Dataset[T]):
    """Items of `dataset` at a fixed table of indices; the base of shuffle, partial, select and sampler.

    Example:
        >>> from ember.data import InMemoryDataset
        >>> list(IndexedDataset(InMemoryDataset("abc"), [2, 0]))
        ['c', 'a']
    """

    def __init__(self, dataset: Dataset[T], indices: Sequence[int] | np.ndarray) -> None:
        table = np.asarray(indices)
        if table.ndim != 1 or not (table.size == 0 or np.issubdtype(table.dtype, np.integer)):
            raise TypeError(f"indices must be a 1-D sequence of integers, got array of shape "
                            f"{table.shape} and dtype {table.dtype}")
        n = len(dataset)
        bad = table[(table < -n) | (table >= n)]
        if bad.size:
            raise IndexError(f"index {int(bad[0])} out of range for dataset of length {n}")
        self.dataset = dataset
        self.indices = np.where(table < 0, table + n, table).astype(np.int64)

    def wrapped(self) -> Sequence[Dataset[Any]]:
        return (self.dataset,)

    def __len__(self) -> int:
        return len(self.indices)

    def get(self, i: int) -> T:
        return self.dataset.get(int(self.indices[i]))


class WindowsDataset(Dataset[list[T]]):
    """Sliding windows: item `i` is `[ds[i], ..., ds[i + size - 1]]`; `len(ds) - size + 1` of them.

    Example:
        >>> from ember.data import InMemoryDataset
        >>> list(WindowsDataset(InMemoryDataset([1, 2, 3]), 2))
        [[1, 2], [2, 3]]
    """

    def __init__(self, dataset: Dataset[T], size: int) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"window size must be a positive integer, got {size!r}")
        self.dataset = dataset
        self.size = size

    def wrapped(self) -> Sequence[Dataset[Any]]:
        return (self.dataset,)

    def __len__(self) -> int:
        return max(0, len(self.dataset) - self.size + 1)

    def get(self, i: int) -> list[T]:
        return [self.dataset.get(i + k) for k in range(self.size)]


class ComposedDataset(Dataset[T]):
    """Concatenation: the items of each dataset in turn.

    Example:
        >>> from ember.data import InMemoryDataset
        >>> list(ComposedDataset([InMemoryDataset([1]), InMemoryDataset([2, 3])]))
        [1, 2, 3]
    """

    def __init__(self, datasets: Sequence[Dataset[T]]) -> None:
        for d in datasets:
            if not isinstance(d, Dataset):
                raise TypeError(f"compose takes datasets, got {type(d).__name__}")
        self.datasets = list(datasets)
        # ends[k] is one past the last global index served by datasets[k].
        self.ends = list(np.cumsum([len(d) for d in self.datasets], dtype=np.int64).tolist())

    def wrapped(self) -> Sequence[Dataset[Any]]:
        return self.datasets

    def __len__(self) -> int:
        return self.ends[-1] if self.ends else 0

    def get(self, i: int) -> T:
        k = bisect.bisect_right(self.ends, i)
        start = self.ends[k - 1] if k else 0
        return self.datasets[k].get(i - start)


def map(dataset: Dataset[T], fn: Callable[[T], U]) -> Dataset[U]:
    """Dataset of `fn(item)` for each item, computed on access.

    Example:
        >>> from ember.data import InMemoryDataset
        >>> list(map(InMemoryDataset([1, 2]), lambda x: x * 10))
        [10, 20]
    """
    return MappedDataset(dataset, fn)


def map_random(dataset: Dataset[T], fn: Callable[[T, np.random.Generator], U], seed: int) -> Dataset[U]:
    """Dataset of `fn(item, rng)`, `rng` fixed by (seed, epoch, index): reproducible augmentation.

    The `DataLoader` sets the epoch before each pass, so items change from epoch to epoch but a
    run gives the same batches for any number of workers.

    Example:
        >>> import numpy as np
        >>> from ember.data import InMemoryDataset
        >>> from ember.data.vision.augment import random_horizontal_flip
        >>> images = InMemoryDataset([np.array([[1, 2]])])
        >>> flipped = map_random(images, lambda im, rng: random_horizontal_flip(im, rng=rng), seed=0)
        >>> flipped[0].shape
        (1, 2)
    """
    return RandomMappedDataset(dataset, fn, seed)


def shuffled(dataset: Dataset[T], seed: int) -> Dataset[T]:
    """The items in the order of `np.random.default_rng(seed).permutation(len(dataset))`.

    Example:
        >>> from ember.data import InMemoryDataset
        >>> sorted(shuffled(InMemoryDataset([3, 1, 2]), seed=0))
        [1, 2, 3]
    """
    return IndexedDataset(dataset, np.random.default_rng(seed).permutation(len(dataset)))


def partial(dataset: Dataset[T], start: int, end: int) -> Dataset[T]:
    """Items `start` to `end - 1`; needs `0 <= start <= end <= len(dataset)`.

    Example:
        >>> from ember.data import InMemoryDataset
        >>> list(partial(InMemoryDataset("abcd"), 1, 3))
        ['b', 'c']
    """
    n = len(dataset)
    if not 0 <= start <= end <= n:
        raise ValueError(f"partial needs 0 <= start <= end <= {n} (the dataset length), "
                         f"got start={start}, end={end}")
    return IndexedDataset(dataset, np.arange(start, end))


def select(dataset: Dataset[T], indices: Sequence[int]) -> Dataset[T]:
    """Items at `indices` (negatives count from the end; repeats allowed), in that order.

    Example:
        >>> from ember.data import InMemoryDataset
        >>> list(select(InMemoryDataset("abc"), [2, -3, 2]))
        ['c', 'a', 'c']
    """
    return IndexedDataset(dataset, indices)


def windows(dataset: Dataset[T], size: int) -> Dataset[list[T]]:
    """Sliding windows of `size` consecutive items; empty when the dataset is shorter than `size`.

    Example:
        >>> from ember.data import InMemoryDataset
        >>> windows(InMemoryDataset([1, 2, 3, 4]), 3)[1]
        [2, 3, 4]
    """
    return WindowsDataset(dataset, size)


def compose(*datasets: Dataset[T]) -> Dataset[T]:
    """Concatenation of `datasets`, in order.

    Example:
        >>> from ember.data import InMemoryDataset
        >>> len(compose(InMemoryDataset([1]), InMemoryDataset([2, 3])))
        3
    """
    return ComposedDataset(datasets)


def sampler(dataset: Dataset[T], n: int, replace: bool = True, seed: int = 0) -> Dataset[T]:
    """`n` items drawn from `dataset` with the generator `np.random.default_rng(seed)`.

    With `replace=True` each item is an independent uniform draw. Without replacement every item
    appears once per pass: the table is whole permutations laid end to end, so `n` may exceed the
    length (each item then appears `n // len` or `n // len + 1` times).

    Example:
        >>> from ember.data import InMemoryDataset
        >>> sorted(sampler(InMemoryDataset([1, 2, 3]), 3, replace=False))
        [1, 2, 3]
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"sampler needs a non-negative integer n, got {n!r}")
    length = len(dataset)
    if length == 0 and n > 0:
        raise ValueError(f"cannot sample {n} items from an empty dataset")
    rng = np.random.default_rng(seed)
    if n == 0:
        return IndexedDataset(dataset, np.zeros(0, dtype=np.int64))
    if replace:
        return IndexedDataset(dataset, rng.integers(0, length, size=n))
    passes = -(-n // length)
    table = np.concatenate([rng.permutation(length) for _ in range(passes)])
    return IndexedDataset(dataset, table[:n])
