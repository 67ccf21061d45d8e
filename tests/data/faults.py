"""Loader scenarios that could hang a broken loader forever: each runs in its own Python process
(`python -c "from data.faults import main; main('<scenario>')"`) so that the test can bound it with a
subprocess timeout, and prints one JSON line describing what happened.

Scenarios:
    mid_send     a worker SIGKILLs itself halfway through writing a 16 MiB batch to its pipe
    kill         the main process SIGKILLs a worker at a random moment while 16 MiB batches are being
                 built and sent (three rounds)
    orphan       workers stuck in __getitem__; prints "ready" and waits for the test to SIGKILL it
    orphan_fork  the same with "fork" workers and no prctl: only the worker's watchdog can end them
"""

from __future__ import annotations

import json
import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
from typing import Any

import numpy as np

from ember.data import DataLoader, Dataset, WorkerError

MIB16 = 4 << 20  # float32 elements in 16 MiB


class Big(Dataset[np.ndarray]):
    """Item i is a 16 MiB float32 vector filled with i, made in `delay` seconds; item `die_at` kills
    its worker mid-send."""

    def __init__(self, n: int, die_at: int = -1, delay: float = 0.0) -> None:
        self.n, self.die_at, self.delay = n, die_at, delay

    def __len__(self) -> int:
        return self.n

    def get(self, i: int) -> np.ndarray:
        if i == self.die_at:
            _die_halfway_through_the_next_large_write()
        time.sleep(self.delay)
        return np.full(MIB16, i, dtype=np.float32)


def _die_halfway_through_the_next_large_write() -> None:
    """Make this process write half of its next pipe write of 1 MiB or more, then SIGKILL itself."""
    conn_type: Any = multiprocessing.connection.Connection
    send = conn_type._send

    def half_then_die(self: Any, buf: Any, *args: Any) -> None:
        if len(buf) >= 1 << 20:
            send(self, memoryview(buf)[:len(buf) // 2], *args)
            os.kill(os.getpid(), signal.SIGKILL)
        send(self, buf, *args)

    conn_type._send = half_then_die


class Stuck(Dataset[np.ndarray]):
    """Items from 1 on never come: __getitem__ sleeps (far longer than any test)."""

    def __len__(self) -> int:
        return 8

    def get(self, i: int) -> np.ndarray:
        if i >= 1:
            time.sleep(600)
        return np.zeros(3, np.float32)


def _workers() -> list[Any]:
    return sorted((p for p in mp.active_children() if p.name.startswith("ember-data-worker-")), key=lambda p: p.name)


def _iterate(loader: DataLoader[Any], kill_after_first: bool) -> dict[str, Any]:
    """What iterating `loader` gave; "seconds" counts from the first batch (after the workers' start-up)."""
    count, start = 0, 0.0
    try:
        for batch in loader:
            assert float(batch[0, 0]) == loader.batch_indices(0)[count][0], "batches in order"
            count += 1
            if count == 1:
                start = time.monotonic()
            if kill_after_first and count == 1:
                victim = _workers()[0]
                threading.Timer(np.random.default_rng().uniform(0, 0.05), os.kill,
                                (victim.pid, signal.SIGKILL)).start()
    except WorkerError as e:
        return {"error": str(e), "batches": count, "seconds": time.monotonic() - start}
    return {"error": None, "batches": count, "seconds": time.monotonic() - start}


def main(scenario: str) -> None:
    if scenario == "mid_send":
        print(json.dumps(_iterate(DataLoader(Big(8, die_at=3), batch_size=1, num_workers=2), False)))
    elif scenario == "kill":
        rounds = [_iterate(DataLoader(Big(16, delay=0.05), batch_size=1, num_workers=2), True) for _ in range(3)]
        print(json.dumps(rounds))
    elif scenario in ("orphan", "orphan_fork"):
        context = "spawn"
        if scenario == "orphan_fork":
            from ember.data import workers
            context, workers._die_with_parent = "fork", lambda: None
        it = iter(DataLoader(Stuck(), batch_size=1, num_workers=2, multiprocessing_context=context))
        next(it)
        print("ready", flush=True)
        next(it)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    sys.stdout.flush()
