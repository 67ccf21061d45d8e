"""Whether autodiff records operations in the current thread (`ember.no_grad()`)."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

_state = threading.local()


def grad_enabled() -> bool:
    """True unless the current thread is inside `ember.no_grad()`."""
    return getattr(_state, "enabled", True)


@contextmanager
def no_grad() -> Iterator[None]:
    """Stop recording operations for autodiff in this thread (other threads are not affected).

    Example:
        >>> with ember.no_grad():
        ...     y = x * 2          # y has no gradient history
    """
    previous = grad_enabled()
    _state.enabled = False
    try:
        yield
    finally:
        _state.enabled = previous


@contextmanager
def enable_grad() -> Iterator[None]:
    """Record operations again inside `ember.no_grad()` (what a recomputation in backward needs).

    Example:
        >>> with ember.no_grad(), enable_grad():
        ...     y = x * 2          # y is tracked
    """
    previous = grad_enabled()
    _state.enabled = True
    try:
        yield
    finally:
        _state.enabled = previous
