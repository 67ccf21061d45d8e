"""Fault injection for atomic writes: run a save in a forked child that SIGKILLs itself at its Nth
rename event (just before or just after each `os.replace`, `os.rename` and folder swap).

Example:
    >>> n = 1
    >>> while run_killed_at(n, lambda: save(path, state)):  # doctest: +SKIP
    ...     check(path); n += 1
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from collections.abc import Callable
from typing import Any

import pytest

from ember import atomic


def run_killed_at(n: int, action: Callable[[], None], exchange: bool = True, timeout: float = 60) -> bool:
    """Run `action` in a forked child killed at rename event `n`; True if it was killed, False if it
    completed first. With `exchange=False` the child acts as on a system that cannot swap folders."""
    child = mp.get_context("fork").Process(target=_child, args=(n, action, exchange))
    child.start()
    child.join(timeout)
    if child.is_alive():
        child.kill()
        child.join()
        pytest.fail(f"the save killed at rename event {n} ran past {timeout} s")
    if child.exitcode == -signal.SIGKILL:
        return True
    assert child.exitcode == 0, f"the save failed with exit code {child.exitcode}"
    return False


def _child(n: int, action: Callable[[], None], exchange: bool) -> None:
    events = 0

    def event() -> None:
        nonlocal events
        events += 1
        if events == n:
            os.kill(os.getpid(), signal.SIGKILL)

    def counted(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            event()
            result = fn(*args, **kwargs)
            event()
            return result
        return wrapper

    if not exchange:
        atomic._exchange = lambda a, b: False
    os.replace, os.rename, atomic._exchange = counted(os.replace), counted(os.rename), counted(atomic._exchange)
    action()
