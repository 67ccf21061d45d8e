"""Worker processes that build whole batches for the `DataLoader`.

Each worker receives the dataset and batcher once (pickled at start) and owns two pipes: tasks
`(batch_number, indices)` come in on one, finished batches go out on the other. Batch n goes to
worker `n % num_workers` and every worker builds its tasks in order, so the next result on a
worker's pipe is always the batch the loader waits for from it. A result is a frame: a header
(batch number, ok flag, payload length), then the payload (the pickled batch, or the worker's
traceback text) in messages of at most `_CHUNK` bytes, read against a deadline:

- A worker that dies at any point, mid-frame included, makes `receive` raise `WorkerError` naming
  the worker, its pid and its exit code or signal.
- With `timeout` > 0, a batch late by more raises `WorkerError` naming worker, pid, batch and timeout.

Workers start by the loader's method; they are terminated and joined when the pool is closed,
garbage collected, or at interpreter exit; they ignore SIGINT, and exit when the main process dies,
even while stuck in `__getitem__` (how, and the start methods: docs/training.md, "Data loader workers").

Example:
    >>> from ember.data import InMemoryDataset, default_batcher
    >>> pool = WorkerPool(InMemoryDataset([1, 2, 3]), default_batcher, num_workers=1)  # doctest: +SKIP
    >>> pool.submit(0, [0, 2]); pool.receive(0, timeout=0)  # doctest: +SKIP
    (True, bytearray(b'...'))
    >>> pool.close()  # doctest: +SKIP
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import pickle
import queue
import signal
import struct
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from .dataset import Dataset
from .errors import WorkerError

# How long a worker asked to stop (or terminated) may take before it is stopped harder.
_JOIN_S = 2.0
# How often a worker's watchdog checks that its parent is alive.
_WATCH_S = 0.5
# Payload bytes per pipe message: the granularity at which a deadline is checked mid-frame.
_CHUNK = 1 << 20
# A frame's header: batch number, ok flag, payload length.
_HEADER = struct.Struct("<qBQ")
_PR_SET_PDEATHSIG = 1
_UNGUARDED = ("DataLoader workers started with 'spawn' or 'forkserver' import the main script again, and "
              "this one starts workers at its top level, so each worker would start more: put the code that "
              "iterates the loader under `if __name__ == \"__main__\":`, or pass multiprocessing_context=\"fork\" "
              "(the default on Linux)")


class WorkerPool:
    """`num_workers` processes building batches from `dataset` with `batcher`.

    Example:
        >>> pool = WorkerPool(dataset, batcher, num_workers=2)  # doctest: +SKIP
    """

    def __init__(self, dataset: Dataset[Any], batcher: Callable[[list[Any]], Any], num_workers: int,
                 context: str = "spawn") -> None:
        if num_workers < 1:
            raise ValueError(f"a worker pool needs num_workers >= 1, got {num_workers}")
        if getattr(mp.current_process(), "_inheriting", False):  # multiprocessing's own flag for this
            raise WorkerError(_UNGUARDED)
        ctx: Any = mp.get_context(context)  # typeshed's BaseContext lacks Process
        self._context = context
        self._workers: list[Any] = []
        self._tasks: list[Connection] = []
        self._results: list[Connection] = []
        self._finalizer = weakref.finalize(self, _shutdown, self._workers, self._tasks, self._results)
        try:
            for k in range(num_workers):
                self._start(ctx, k, dataset, batcher)
        except Exception as exc:
            self._finalizer()
            if isinstance(exc, (pickle.PicklingError, AttributeError, TypeError)):
                raise TypeError(
                    f"DataLoader workers receive the dataset and batcher pickled, and pickling failed: "
                    f"{exc}. Use module-level functions and classes (not lambdas or local functions), "
                    f"or num_workers=0") from exc
            raise

    def _start(self, ctx: Any, k: int, dataset: Dataset[Any], batcher: Callable[[list[Any]], Any]) -> None:
        task_reader, task_writer = ctx.Pipe(duplex=False)
        result_reader, result_writer = ctx.Pipe(duplex=False)
        self._tasks.append(task_writer)
        self._results.append(result_reader)
        worker = ctx.Process(target=_worker_main, args=(k, dataset, batcher, task_reader, result_writer),
                             name=f"ember-data-worker-{k}", daemon=True)
        self._workers.append(worker)
        try:
            worker.start()
        finally:
            # The worker's ends are now its own: its death is then EOF on the result pipe.
            task_reader.close()
            result_writer.close()

    def submit(self, number: int, indices: Sequence[int]) -> None:
        """Queue batch `number`, made of the dataset items at `indices`, on worker `number % num_workers`."""
        k = number % len(self._workers)
        try:
            self._tasks[k].send((number, list(indices)))
        except OSError:
            raise self._died(k, number) from None

    def receive(self, number: int, timeout: float) -> tuple[bool, bytearray]:
        """Batch `number` as `(ok, payload)`: the pickled batch, or the error text when not ok.

        Waits at most `timeout` seconds (0: no limit). Raises `WorkerError` when the worker building
        it dies (killed, crashed, exited) or the timeout passes.
        """
        k = number % len(self._workers)
        deadline = time.monotonic() + timeout if timeout else None
        header = self._read(k, number, timeout, deadline)
        got, ok, size = _HEADER.unpack(header)
        if got != number:
            raise WorkerError(f"DataLoader worker {k} sent batch {got} where batch {number} was due")
        payload = bytearray(size)
        view, received = memoryview(payload), 0
        while received < size:
            received += self._read(k, number, timeout, deadline, into=view[received:])
        return bool(ok), payload

    def _read(self, k: int, number: int, timeout: float, deadline: float | None,
              into: memoryview | None = None) -> Any:
        """One message from worker `k`: its bytes, or with `into`, the count of bytes written there."""
        conn, worker = self._results[k], self._workers[k]
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready = wait([conn, worker.sentinel], remaining)
        if not ready:
            raise WorkerError(f"DataLoader timed out: worker {k} (pid {worker.pid}) did not deliver batch "
                              f"{number} within timeout={timeout} s")
        if conn not in ready:
            raise self._died(k, number)
        try:
            return conn.recv_bytes() if into is None else conn.recv_bytes_into(into)
        except (EOFError, OSError):
            raise self._died(k, number) from None

    def _died(self, k: int, number: int) -> WorkerError:
        worker = self._workers[k]
        worker.join(_JOIN_S)
        hint = (f" (under {self._context!r}, a script without the `if __name__ == \"__main__\":` guard stops "
                f"its workers this way: see the worker's message above)") if self._context != "fork" else ""
        return WorkerError(f"DataLoader worker {k} (pid {worker.pid}) exited unexpectedly with "
                           f"{_exit_status(worker.exitcode)} while batch {number} was due from it{hint}")

    def close(self, graceful: bool = False) -> None:
        """Stop the workers: with `graceful`, ask them to finish first; then terminate and join any left."""
        if graceful and self._finalizer.alive:
            for conn in self._tasks:
                try:
                    conn.send(None)
                except OSError:
                    pass
            for w in self._workers:
                w.join(timeout=_JOIN_S)
        self._finalizer()


def _exit_status(code: int | None) -> str:
    if code is None:
        return "no exit status (its result pipe closed)"
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"


def _shutdown(workers: list[Any], tasks: list[Connection], results: list[Connection]) -> None:
    started = [w for w in workers if w.pid is not None]
    for w in started:
        if w.is_alive():
            w.terminate()
    for w in started:
        w.join(_JOIN_S)
        if w.is_alive():
            w.kill()
            w.join()
    for conn in tasks + results:
        conn.close()


def _worker_main(worker_id: int, dataset: Dataset[Any], batcher: Callable[[list[Any]], Any],
                 tasks: Connection, results: Connection) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    threading.Thread(target=_take_tasks, args=(tasks, inbox), name="ember-data-watchdog", daemon=True).start()
    while (task := inbox.get()) is not None:
        number, indices = task
        try:
            # Pickled here so an unpicklable batch is reported like any other error.
            batch = batcher([dataset[i] for i in indices])
            ok, payload = True, pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            ok, payload = False, (f"worker {worker_id}, batch {number} (dataset indices {indices}):\n"
                                  f"{traceback.format_exc()}").encode()
        try:
            _send_frame(results, number, ok, payload)
        except OSError:
            return  # the main process closed its end: nobody wants this batch


def _send_frame(conn: Connection, number: int, ok: bool, payload: bytes) -> None:
    conn.send_bytes(_HEADER.pack(number, ok, len(payload)))
    view = memoryview(payload)
    for start in range(0, len(view), _CHUNK):
        conn.send_bytes(view[start:start + _CHUNK])


def _die_with_parent() -> None:
    """On Linux, have the kernel SIGKILL this process when its parent ends."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # no prctl in this libc: the watchdog alone covers it


def _take_tasks(tasks: Connection, inbox: queue.SimpleQueue[Any]) -> None:
    """Move tasks into `inbox` as they come (the main process never blocks on a busy worker's pipe);
    exit the process once the parent is gone, even while the main thread is stuck in the dataset."""
    parent, parent_pid = mp.parent_process(), os.getppid()
    watched: list[Any] = [tasks] + ([parent.sentinel] if parent is not None else [])
    while True:
        ready = wait(watched, _WATCH_S)
        if os.getppid() != parent_pid or (parent is not None and parent.sentinel in ready):
            os._exit(1)
        if tasks in ready:
            try:
                task = tasks.recv()
            except (EOFError, OSError):
                task = None
            inbox.put(task)
            if task is None:
                return
