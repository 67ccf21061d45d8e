"""The dataset protocol: a sized, indexable collection of items, and the in-memory dataset.

A dataset implements `__len__` and `get(i)` for `0 <= i < len(self)`; indexing with `ds[i]` adds
negative indices and a bounds check. Transforms (`map`, `map_random`, `shuffled`, `partial`,
`select`, `windows`, `compose`, `sampler`) return new datasets that read through to this one; they
are also functions in `ember.data.transform`.

Datasets handed to a `DataLoader` with worker processes are pickled, so they should hold picklable
state (no lambdas, no open connections).

Example:
    >>> ds = InMemoryDataset([10, 20, 30])
    >>> ds[-1], len(ds.map(str)), ds.partial(1, 3)[0]
    (30, 3, 20)
"""

from __future__ import annotations

import operator
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

T = TypeVar("T")
U = TypeVar("U")


class Dataset(ABC, Generic[T]):
    """Base of every dataset: `__len__` and `get(i)` for an in-range, non-negative `i`.

    Example:
        >>> class Squares(Dataset[int]):
        ...     def __len__(self) -> int: return 4
        ...     def get(self, i: int) -> int: return i * i
        >>> Squares()[-1], list(Squares())
        (9, [0, 1, 4, 9])
    """

    @abstractmethod
    def __len__(self) -> int:
        """Number of items."""

    @abstractmethod
    def get(self, i: int) -> T:
        """Item `i`; callers guarantee `0 <= i < len(self)` (use `ds[i]` for checked access)."""

    def __getitem__(self, index: int) -> T:
        """Item at `index`; negative counts from the end; out of range raises `IndexError`."""
        return self.get(normalize_index(index, len(self)))

    def __iter__(self) -> Iterator[T]:
        for i in range(len(self)):
            yield self.get(i)

    def set_epoch(self, epoch: int) -> None:
        """Tell epoch-dependent datasets which epoch is read; wrappers pass it to the datasets they wrap.

        The `DataLoader` calls it before each pass. Only `map_random` results use it.
        Example: `ds.map_random(augment, seed=0).set_epoch(3)`.
        """
        for inner in self.wrapped():
            inner.set_epoch(epoch)

    def wrapped(self) -> Sequence[Dataset[Any]]:
        """The datasets this one reads from (none for a source of items)."""
        return ()

    def map(self, fn: Callable[[T], U]) -> Dataset[U]:
        """Dataset of `fn(item)`, computed on access. Example: `ds.map(lambda x: x * 2)`."""
        from .transform import map as map_

        return map_(self, fn)

    def map_random(self, fn: Callable[[T, np.random.Generator], U], seed: int) -> Dataset[U]:
        """Dataset of `fn(item, rng)` with a generator fixed by (seed, epoch, index), for augmentation.

        Example: `ds.map_random(lambda item, rng: random_crop(item, 28, padding=4, rng=rng), seed=0)`.
        """
        from .transform import map_random

        return map_random(self, fn, seed)

    def shuffled(self, seed: int) -> Dataset[T]:
        """The items in an order fixed by `seed`. Example: `ds.shuffled(seed=0)`."""
        from .transform import shuffled

        return shuffled(self, seed)

    def partial(self, start: int, end: int) -> Dataset[T]:
        """Items `start` to `end - 1`, like `ds[start:end]`. Example: `ds.partial(0, 100)`."""
        from .transform import partial

        return partial(self, start, end)

    def select(self, indices: Sequence[int]) -> Dataset[T]:
        """Items at `indices`, in that order. Example: `ds.select([3, 0, 3])`."""
        from .transform import select

        return select(self, indices)

    def windows(self, size: int) -> Dataset[list[T]]:
        """Sliding windows of `size` consecutive items. Example: `ds.windows(3)[0] == [ds[0], ds[1], ds[2]]`."""
        from .transform import windows

        return windows(self, size)

    def compose(self, *others: Dataset[T]) -> Dataset[T]:
        """This dataset's items followed by each of `others`'. Example: `train.compose(extra)`."""
        from .transform import compose

        return compose(self, *others)

    def sampler(self, n: int, replace: bool = True, seed: int = 0) -> Dataset[T]:
        """`n` items drawn at random (with or without replacement). Example: `ds.sampler(1000, seed=1)`."""
        from .transform import sampler

        return sampler(self, n, replace=replace, seed=seed)


class InMemoryDataset(Dataset[T]):
    """A dataset over a list of items held in memory.

    Example:
        >>> InMemoryDataset([(0, "a"), (1, "b")])[1]
        (1, 'b')
    """

    def __init__(self, items: Sequence[T]) -> None:
        self._items = list(items)

    def __len__(self) -> int:
        return len(self._items)

    def get(self, i: int) -> T:
        return self._items[i]

    def __repr__(self) -> str:
        return f"InMemoryDataset(len={len(self._items)})"


class SequenceDataset(Dataset[T]):
    """A dataset over any object with `__len__` and `__getitem__` (a list, a NumPy array, a PyTorch-style
    map-style dataset), read in place: item i is `items[i]`.

    Example:
        >>> SequenceDataset([0, 2, 4])[-1]
        4
    """

    def __init__(self, items: Sequence[T]) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    def get(self, i: int) -> T:
        return self._items[i]

    def __repr__(self) -> str:
        return f"SequenceDataset({type(self._items).__name__}, len={len(self._items)})"


def normalize_index(index: Any, length: int) -> int:
    """`index` as a non-negative int below `length`, counting negatives from the end.

    Example:
        >>> normalize_index(-1, 5)
        4
    """
    try:
        i = operator.index(index)
    except TypeError:
        raise TypeError(f"dataset index must be an integer, got {type(index).__name__}") from None
    if not -length <= i < length:
        raise IndexError(f"index {i} out of range for dataset of length {length}")
    return i + length if i < 0 else i
