"""`DataLoader`: batches of a dataset, in a seeded order, optionally built by worker processes.

The batch order of an epoch is a pure function of `(seed, epoch)`, and batches are built by the
same batcher from the same index lists whatever the number of workers, so `num_workers` 0, 1 or 8
give identical batches. The loader counts epochs (one per completed iteration) and the position in
the current one; `state_dict()` / `load_state_dict()` let a run resume mid-epoch in the same order.
Before each pass it calls `dataset.set_epoch(epoch)`, so `map_random` augmentations follow the
epoch too.

Batches are built as NumPy data (in workers when `num_workers > 0`) and moved to `device`, when one
is given, in the main process.

Workers are started for each pass ("fork" on Linux, else "spawn", which needs a picklable dataset
and batcher and the `__main__` guard) and stopped when it is exhausted, on any error or Ctrl-C inside
`next()`, on `close()`, on garbage collection and at interpreter exit (docs/training.md, "Data loader
workers").

Example:
    >>> from ember.data import InMemoryDataset
    >>> loader = DataLoader(InMemoryDataset(list(range(5))), batch_size=2)
    >>> [b.tolist() for b in loader]
    [[0, 1], [2, 3], [4]]
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import sys
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

import numpy as np

from .batcher import default_batcher, to_device
from .dataset import Dataset, SequenceDataset
from .errors import WorkerError
from .sampler import RandomSampler, Sampler, SequentialSampler
from .workers import WorkerPool

B = TypeVar("B")


class DataLoader(Generic[B]):
    """Iterate a dataset in batches.

    Args:
        dataset: the items: a `Dataset`, or anything with `__len__` and `__getitem__` (a list, a NumPy
            array, a PyTorch map-style dataset), read in place.
        batch_size: items per batch; the last batch is smaller unless `drop_last`.
        shuffle: visit items in the order `np.random.default_rng([seed, epoch]).permutation(n)`
            (`sampler=RandomSampler(dataset)`).
        seed: fixes the shuffle or sampler order together with the epoch.
        drop_last: leave out a last, incomplete batch.
        num_workers: worker processes building batches; 0 builds them in this process.
        prefetch: batches queued ahead per worker (bounds memory held by finished batches).
        batcher: turns a list of items into a batch; `default_batcher` stacks into NumPy arrays.
            With workers, it and the dataset must be picklable.
        device: when given, each batch's arrays become ember tensors on it (in the main process).
        sampler: the order of indices (`ember.data.sampler`: `RandomSampler`, `WeightedRandomSampler`,
            `SubsetRandomSampler`, `SequentialSampler`), drawn from `(seed, epoch)`; not with `shuffle`.
        multiprocessing_context: how workers start: "fork", "spawn" or "forkserver"; by default "fork"
            on Linux (PyTorch's default) and "spawn" elsewhere.
        timeout: seconds to wait for each batch from the workers (the first wait includes their
            start-up); 0 waits without limit. When it passes, `WorkerError` names the worker, its
            pid, the batch and the timeout. A worker that dies raises `WorkerError` at once, whatever
            the timeout.

    Example:
        >>> from ember.data import InMemoryDataset
        >>> loader = DataLoader(InMemoryDataset(list(range(10))), batch_size=4, shuffle=True, seed=1)
        >>> len(loader), sorted(np.concatenate(list(loader)).tolist()) == list(range(10))
        (3, True)
    """

    def __init__(self, dataset: Dataset[Any], batch_size: int, shuffle: bool = False, seed: int = 0,
                 drop_last: bool = False, num_workers: int = 0, prefetch: int = 2,
                 batcher: Callable[[list[Any]], B] | None = None, device: Any = None,
                 multiprocessing_context: str | None = None, timeout: float = 0,
                 sampler: Sampler | None = None) -> None:
        if not isinstance(dataset, Dataset):
            if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
                raise TypeError(f"DataLoader needs a Dataset or a sequence (__len__ and __getitem__), "
                                f"got {type(dataset).__name__}")
            dataset = SequenceDataset(dataset)
        if sampler is not None and not isinstance(sampler, Sampler):
            raise TypeError(f"DataLoader sampler must be an ember.data sampler (RandomSampler, ...), "
                            f"got {type(sampler).__name__}")
        if sampler is not None and shuffle:
            raise ValueError("DataLoader takes shuffle=True or a sampler, not both (shuffle=True is "
                             "sampler=RandomSampler(dataset))")
        if multiprocessing_context is None:
            multiprocessing_context = "fork" if sys.platform.startswith("linux") else "spawn"
        for name, value, least in (("batch_size", batch_size, 1), ("num_workers", num_workers, 0),
                                   ("prefetch", prefetch, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"DataLoader {name} must be an integer >= {least}, got {value!r}")
        if multiprocessing_context not in mp.get_all_start_methods():
            raise ValueError(f"multiprocessing_context must be one of {mp.get_all_start_methods()}, "
                             f"got {multiprocessing_context!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout < float("inf"):
            raise ValueError(f"DataLoader timeout must be a finite number of seconds >= 0, got {timeout!r}")
        if timeout and not num_workers:
            raise ValueError(f"DataLoader timeout={timeout} bounds the wait for worker processes; "
                             f"with num_workers=0 there are none (use timeout=0)")
        if batcher is not None and not callable(batcher):
            raise TypeError(f"batcher must be callable, got {type(batcher).__name__}")
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.sampler: Sampler = sampler or (RandomSampler(dataset) if shuffle else SequentialSampler(dataset))
        self.seed = seed
        self.drop_last = drop_last
        self.num_workers = num_workers
        self.prefetch = prefetch
        self.batcher: Callable[[list[Any]], Any] = batcher if batcher is not None else default_batcher
        self.device = device
        self.multiprocessing_context = multiprocessing_context
        self.timeout = timeout
        self.epoch = 0
        self._position = 0
        self._resume_at = 0
        # Only the most recently started iterator moves the epoch and position.
        self._generation = 0

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def batch_indices(self, epoch: int) -> list[np.ndarray]:
        """The dataset indices of every batch of `epoch`, in order.

        Example:
            >>> from ember.data import InMemoryDataset
            >>> [b.tolist() for b in DataLoader(InMemoryDataset("abcde"), 2).batch_indices(0)]
            [[0, 1], [2, 3], [4]]
        """
        order = np.asarray(self.sampler.indices(np.random.default_rng([self.seed, epoch])), dtype=np.int64)
        n = len(self.dataset)
        if order.size and not (-n <= order.min() and order.max() < n):
            bad = order[(order < -n) | (order >= n)][0]
            raise IndexError(f"DataLoader: {type(self.sampler).__name__} gave index {bad} for a dataset of {n} items")
        return [order[k * self.batch_size:(k + 1) * self.batch_size] for k in range(len(self))]

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration run `epoch` from its start. Example: `loader.set_epoch(3)`."""
        if not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be a non-negative integer, got {epoch!r}")
        self.epoch = epoch
        self._position = self._resume_at = 0

    def state_dict(self) -> dict[str, int]:
        """`{"epoch", "position", "seed"}`: position counts the batches of `epoch` already handed out.

        Example:
            >>> from ember.data import InMemoryDataset
            >>> DataLoader(InMemoryDataset([1]), 1).state_dict()
            {'epoch': 0, 'position': 0, 'seed': 0}
        """
        return {"epoch": self.epoch, "position": self._position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Make the next iteration continue `state["epoch"]` after `state["position"]` batches.

        Example:
            >>> loader.load_state_dict(saved)  # doctest: +SKIP
        """
        missing = {"epoch", "position", "seed"} - set(state)
        if missing:
            raise KeyError(f"DataLoader state is missing {sorted(missing)}; expected epoch, position, seed")
        if state["seed"] != self.seed:
            raise ValueError(f"DataLoader state has seed {state['seed']} but this loader has seed "
                             f"{self.seed}; the batch order would differ")
        if not 0 <= state["position"] <= len(self):
            raise ValueError(f"DataLoader state position {state['position']} is outside 0..{len(self)} "
                             f"(batches per epoch)")
        if state["position"] == len(self):
            # A state saved after an epoch's last batch resumes at the start of the next epoch.
            self.set_epoch(state["epoch"] + 1)
        else:
            self.set_epoch(state["epoch"])
            self._position = self._resume_at = state["position"]

    def __iter__(self) -> Iterator[B]:
        """Batches of the current epoch, from the start or from a position set by `load_state_dict`."""
        self._generation += 1
        start, self._resume_at = self._resume_at, 0
        self._position = start
        # Before workers start, so their pickled copies see the epoch too.
        self.dataset.set_epoch(self.epoch)
        return LoaderIterator(self, self.batch_indices(self.epoch), start, self._generation)

    def _advance(self, generation: int, position: int) -> None:
        if generation != self._generation:
            return
        if position < len(self):
            self._position = position
        else:
            self.epoch += 1
            self._position = 0


class LoaderIterator(Iterator[B]):
    """One pass over a `DataLoader`; owns the worker processes, if any, until exhausted or closed.

    Example:
        >>> it = iter(loader)  # doctest: +SKIP
        >>> first = next(it); it.close()  # doctest: +SKIP
    """

    def __init__(self, loader: DataLoader[B], batches: list[np.ndarray], start: int, generation: int) -> None:
        self._loader = loader
        self._batches = batches
        self._next = start
        self._generation = generation
        self._finished = False
        self._pool: WorkerPool | None = None
        self._submitted = start
        if loader.num_workers and start < len(batches):
            self._pool = WorkerPool(loader.dataset, loader.batcher, loader.num_workers,
                                    loader.multiprocessing_context)

    def __iter__(self) -> LoaderIterator[B]:
        return self

    def __next__(self) -> B:
        if self._next >= len(self._batches):
            self.close()
            if not self._batches and not self._finished:
                # No batch to hand out, so the epoch ends here rather than at its last batch.
                self._loader._advance(self._generation, 0)
            self._finished = True
            raise StopIteration
        try:
            batch = self._build(self._next)
            if self._loader.device is not None:
                batch = to_device(batch, self._loader.device)
        except BaseException:
            # KeyboardInterrupt included: workers must not outlive a failed or interrupted pass.
            self.close()
            raise
        self._next += 1
        self._loader._advance(self._generation, self._next)
        if self._next == len(self._batches):
            self.close(graceful=True)
        return batch

    def close(self, graceful: bool = False) -> None:
        """Stop this pass and its workers; later `next()` calls raise StopIteration. Safe to repeat."""
        self._next = len(self._batches)
        if self._pool is not None:
            self._pool.close(graceful=graceful)
            self._pool = None

    def _build(self, number: int) -> Any:
        if self._pool is None:
            loader = self._loader
            return loader.batcher([loader.dataset[int(i)] for i in self._batches[number]])
        window = self._loader.prefetch * self._loader.num_workers
        while self._submitted < len(self._batches) and self._submitted - number < window:
            self._pool.submit(self._submitted, self._batches[self._submitted].tolist())
            self._submitted += 1
        ok, payload = self._pool.receive(number, self._loader.timeout)
        if not ok:
            raise WorkerError(f"DataLoader {payload.decode()}")
        return pickle.loads(payload)
