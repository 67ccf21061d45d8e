"""Samplers: the order in which a `DataLoader` visits a dataset's indices, under PyTorch's names.

A sampler's order is drawn from the generator the loader passes it, `np.random.default_rng([seed,
epoch])`, so it is a pure function of the loader's seed and epoch (the same batches with any number of
workers, and a run resumes mid-epoch in the same order). `shuffle=True` is `RandomSampler(dataset)`.

Example:
    >>> from ember.data import DataLoader, WeightedRandomSampler
    >>> loader = DataLoader(list(range(4)), batch_size=2, sampler=WeightedRandomSampler([0, 0, 1, 1], 4), seed=0)
    >>> sorted(set(np.concatenate(list(loader)).tolist()))
    [2, 3]
"""

from __future__ import annotations

from collections.abc import Sequence, Sized

import numpy as np


class Sampler:
    """An order of dataset indices: `len(sampler)` of them, drawn by `indices(rng)`."""

    def __len__(self) -> int:
        raise NotImplementedError

    def indices(self, rng: np.random.Generator) -> np.ndarray:
        """This epoch's indices (int64), drawn from `rng`."""
        raise NotImplementedError


class SequentialSampler(Sampler):
    """0, 1, ..., len(data_source) - 1. Example: `SequentialSampler(dataset)`."""

    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source

    def __len__(self) -> int:
        return len(self.data_source)

    def indices(self, rng: np.random.Generator) -> np.ndarray:
        return np.arange(len(self.data_source))


class RandomSampler(Sampler):
    """A permutation of the indices, or with `replacement` `num_samples` uniform draws (PyTorch's).

    Example:
        >>> RandomSampler(range(5)).indices(np.random.default_rng(0)).tolist()
        [2, 4, 3, 0, 1]
    """

    def __init__(self, data_source: Sized, replacement: bool = False, num_samples: int | None = None) -> None:
        if num_samples is not None and not replacement:
            raise ValueError("RandomSampler: num_samples needs replacement=True (a permutation has len(data_source))")
        self.data_source, self.replacement = data_source, replacement
        self.num_samples = _count("RandomSampler", num_samples) if num_samples is not None else None

    def __len__(self) -> int:
        return self.num_samples if self.num_samples is not None else len(self.data_source)

    def indices(self, rng: np.random.Generator) -> np.ndarray:
        n = len(self.data_source)
        return rng.integers(0, n, size=len(self)) if self.replacement else rng.permutation(n)


class SubsetRandomSampler(Sampler):
    """The given indices, in a random order each epoch. Example: `SubsetRandomSampler(range(0, 100, 2))`."""

    def __init__(self, indices: Sequence[int]) -> None:
        self.subset = np.asarray(indices, dtype=np.int64).reshape(-1)

    def __len__(self) -> int:
        return len(self.subset)

    def indices(self, rng: np.random.Generator) -> np.ndarray:
        return self.subset[rng.permutation(len(self.subset))]


class WeightedRandomSampler(Sampler):
    """`num_samples` indices drawn with probability proportional to `weights` (with `replacement`, the
    default, as PyTorch's; without it, each index at most once).

    Example:
        >>> WeightedRandomSampler([0.0, 1.0], 3).indices(np.random.default_rng(0)).tolist()
        [1, 1, 1]
    """

    def __init__(self, weights: Sequence[float], num_samples: int, replacement: bool = True) -> None:
        w = np.asarray(weights, dtype=np.float64).reshape(-1)
        if not len(w) or not np.all(np.isfinite(w)) or np.any(w < 0) or not w.sum() > 0:
            raise ValueError(f"WeightedRandomSampler: weights must be finite, >= 0 and not all 0, got {weights!r}")
        self.num_samples = _count("WeightedRandomSampler", num_samples)
        if not replacement and self.num_samples > np.count_nonzero(w):
            raise ValueError(f"WeightedRandomSampler: {self.num_samples} samples without replacement from "
                             f"{np.count_nonzero(w)} indices of nonzero weight")
        self.weights, self.replacement = w / w.sum(), replacement

    def __len__(self) -> int:
        return self.num_samples

    def indices(self, rng: np.random.Generator) -> np.ndarray:
        return rng.choice(len(self.weights), size=self.num_samples, replace=self.replacement, p=self.weights)


class DistributedSampler(Sampler):
    """Rank `rank`'s shard of `dataset` out of `num_replicas` (PyTorch's `DistributedSampler`).

    Every rank orders the indices alike (a permutation drawn from the loader's `(seed, epoch)`, the
    same on every rank whose loader has the same seed; `loader.set_epoch(e)` reshuffles, as the
    `Learner` does each epoch), then takes every `num_replicas`-th index from `rank`. The order is made
    to divide evenly: by repeating its first indices (the default, each rank gets ceil(n / replicas)) or,
    with `drop_last`, by leaving out its last ones (floor(n / replicas) each). Shards are disjoint
    except for the repeats, and together cover the dataset. `num_replicas` and `rank` default to the
    current `ember.distributed` group's.

    Example:
        >>> s = DistributedSampler(range(5), num_replicas=2, rank=1, shuffle=False)
        >>> s.indices(np.random.default_rng(0)).tolist()
        [1, 3, 0]
    """

    def __init__(self, dataset: Sized, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, drop_last: bool = False) -> None:
        if num_replicas is None or rank is None:
            from .. import distributed  # lazy: the group exists only in a distributed job
            num_replicas = distributed.world_size() if num_replicas is None else num_replicas
            rank = distributed.rank() if rank is None else rank
        if not isinstance(num_replicas, int) or isinstance(num_replicas, bool) or num_replicas < 1:
            raise ValueError(f"DistributedSampler: num_replicas must be an integer >= 1, got {num_replicas!r}")
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < num_replicas:
            raise ValueError(f"DistributedSampler: rank must be in 0..{num_replicas - 1}, got {rank!r}")
        n = len(dataset)
        if drop_last and n < num_replicas:
            raise ValueError(f"DistributedSampler: drop_last with {n} items over {num_replicas} replicas leaves "
                             f"every rank empty")
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.shuffle, self.drop_last = shuffle, drop_last
        self.num_samples = n // num_replicas if drop_last else -(-n // num_replicas)

    def __len__(self) -> int:
        return self.num_samples

    def indices(self, rng: np.random.Generator) -> np.ndarray:
        n = len(self.dataset)
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        total = self.num_samples * self.num_replicas
        if total > n:  # repeat from the start (several times when n < replicas)
            order = np.resize(order, total) if n else order
        return order[:total][self.rank::self.num_replicas]


def _count(op: str, n: object) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"{op}: num_samples must be a positive integer, got {n!r}")
    return n
