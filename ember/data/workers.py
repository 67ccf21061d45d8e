"""Worker processes that build whole batches for the `DataLoader`.

Each worker receives the dataset and batcher once (pickled at start), then loops: take a task
`(batch_number, indices)` from a shared queue, build the batch, send back `(batch_number, ok,
payload)` where the payload is the pickled batch or, on failure, the worker's traceback text.

Workers are started with the "spawn" method by default: it behaves the same on Linux, macOS and
Windows and never forks a process that holds threads or locks (BLAS pools, the tensor runtime).
The price is that the dataset and batcher must be picklable and worker start-up re-imports modules.

Shutdown is owned by a `weakref.finalize`, so workers are terminated and joined when the pool is
closed, garbage collected, or at interpreter exit. Workers ignore SIGINT (Ctrl-C reaches the whole
process group; the main process decides) and exit on their own if the main process dies.

Example:
    >>> from ember.data import InMemoryDataset, default_batcher
    >>> pool = WorkerPool(InMemoryDataset([1, 2, 3]), default_batcher, num_workers=1)  # doctest: +SKIP
    >>> pool.submit(0, [0, 2]); pool.receive()  # doctest: +SKIP
    (0, True, b'...')
    >>> pool.close()  # doctest: +SKIP
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import queue
import signal
import traceback
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from .dataset import Dataset
from .errors import WorkerError

# How often a blocked get wakes to check that the other side is still alive.
_POLL_S = 0.2
# How long a worker asked to stop may take before it is terminated.
_JOIN_S = 2.0


class WorkerPool:
    """`num_workers` processes building batches from `dataset` with `batcher`.

    Example:
        >>> pool = WorkerPool(dataset, batcher, num_workers=2)  # doctest: +SKIP
    """

    def __init__(self, dataset: Dataset[Any], batcher: Callable[[list[Any]], Any], num_workers: int,
                 context: str = "spawn") -> None:
        if num_workers < 1:
            raise ValueError(f"a worker pool needs num_workers >= 1, got {num_workers}")
        ctx: Any = mp.get_context(context)  # typeshed's BaseContext lacks Process
        self._tasks = ctx.Queue()
        self._results = ctx.Queue()
        self._workers = [
            ctx.Process(target=_worker_loop, args=(k, dataset, batcher, self._tasks, self._results),
                        name=f"ember-data-worker-{k}", daemon=True)
            for k in range(num_workers)
        ]
        self._finalizer = weakref.finalize(self, _shutdown, self._workers, self._tasks, self._results)
        try:
            for w in self._workers:
                w.start()
        except Exception as exc:
            self._finalizer()
            if isinstance(exc, (pickle.PicklingError, AttributeError, TypeError)):
                raise TypeError(
                    f"DataLoader workers receive the dataset and batcher pickled, and pickling failed: "
                    f"{exc}. Use module-level functions and classes (not lambdas or local functions), "
                    f"or num_workers=0") from exc
            raise

    def submit(self, number: int, indices: Sequence[int]) -> None:
        """Queue batch `number`, made of the dataset items at `indices`."""
        self._tasks.put((number, list(indices)))

    def receive(self) -> tuple[int, bool, Any]:
        """Next finished `(batch_number, ok, payload)`: the pickled batch, or the error text when not ok.

        Raises `WorkerError` when a worker process died without reporting (killed, crashed).
        """
        while True:
            try:
                return self._results.get(timeout=_POLL_S)
            except queue.Empty:
                for k, w in enumerate(self._workers):
                    if not w.is_alive():
                        raise WorkerError(f"DataLoader worker {k} (pid {w.pid}) exited unexpectedly "
                                          f"with exit code {w.exitcode}") from None

    def close(self, graceful: bool = False) -> None:
        """Stop the workers: with `graceful`, ask them to finish first; then terminate and join any left."""
        if graceful and self._finalizer.alive:
            for _ in self._workers:
                self._tasks.put(None)
            for w in self._workers:
                w.join(timeout=_JOIN_S)
        self._finalizer()


def _shutdown(workers: list[Any], tasks: Any, results: Any) -> None:
    for w in workers:
        if w.is_alive():
            w.terminate()
    for w in workers:
        if w.pid is not None:
            w.join()
    for q in (tasks, results):
        # Unread items must not keep this process waiting on the queues' feeder threads at exit.
        q.cancel_join_thread()
        q.close()


def _worker_loop(worker_id: int, dataset: Dataset[Any], batcher: Callable[[list[Any]], Any],
                 tasks: Any, results: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The main process only asks a worker to stop after reading everything it needs.
    results.cancel_join_thread()
    parent = mp.parent_process()
    while True:
        try:
            task = tasks.get(timeout=_POLL_S)
        except queue.Empty:
            if parent is not None and not parent.is_alive():
                return
            continue
        if task is None:
            return
        number, indices = task
        try:
            # Pickled here so an unpicklable batch is reported like any other error.
            payload = pickle.dumps(batcher([dataset[i] for i in indices]), protocol=pickle.HIGHEST_PROTOCOL)
            results.put((number, True, payload))
        except Exception:
            results.put((number, False, f"worker {worker_id}, batch {number} (dataset indices "
                                        f"{indices}):\n{traceback.format_exc()}"))
