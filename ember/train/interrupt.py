"""Ctrl-C during training: the first press asks the run to stop after the current optimizer step (so
the checkpoint it saves is consistent); a second press interrupts at once.

Only the main thread can own signal handlers; elsewhere `catch_interrupts` does nothing and a
`KeyboardInterrupt` behaves as usual (the learner still saves the last consistent state).

Example:
    >>> with catch_interrupts() as stop:
    ...     for batch in loader:
    ...         train(batch)
    ...         if stop.requested:
    ...             break
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator


class StopRequest:
    """Set by the first Ctrl-C; `request()` sets it from code (a callback, a test)."""

    def __init__(self) -> None:
        self.requested = False

    def request(self) -> None:
        self.requested = True


@contextmanager
def catch_interrupts() -> Iterator[StopRequest]:
    """Route SIGINT to a `StopRequest` while the block runs (see the module docs)."""
    stop = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum, frame) -> None:
        if stop.requested:
            raise KeyboardInterrupt
        stop.request()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)
