"""The errors ember raises for bad input, each naming what was wrong.

Every error is an `EmberError`; the shape, dtype, device and memory errors also subclass the built-in
exception a Python user would expect (`ValueError`, `TypeError`, `RuntimeError`, `MemoryError`).

Example:
    >>> raise ShapeError("add", "shapes (2, 3) and (4,) do not broadcast")
    Traceback (most recent call last):
    ember.errors.ShapeError: add: shapes (2, 3) and (4,) do not broadcast
"""

from __future__ import annotations

import reprlib


class EmberError(Exception):
    """Base of all ember errors."""


class ShapeError(EmberError, ValueError):
    """Shapes that do not fit the op; the message names the op and the shapes."""

    def __init__(self, op: str, message: str) -> None:
        super().__init__(f"{op}: {message}")
        self.op = op


class OutOfMemoryError(EmberError, MemoryError):
    """A tensor larger than any memory here can hold, refused before anything is allocated (or a device
    allocation that failed); names the op, the shape, the dtype and the bytes. `except MemoryError`
    catches it."""


class DTypeError(EmberError, TypeError):
    """A dtype the op does not accept, or an unknown dtype name."""


class DeviceError(EmberError, RuntimeError):
    """Tensors on two different devices in one op, or an unknown device string."""


class DeviceUnavailableError(DeviceError):
    """A device whose backend cannot run here; the message says what is missing and how to install it."""


class StoreError(EmberError, ValueError):
    """A model file that is truncated, corrupt or of the wrong kind; names the file and the problem."""


class ConfigError(EmberError, ValueError):
    """A bad `ember.toml` key or value, or a bad `EMBER_*` variable; names the key and the file."""


class DomainError(EmberError, ValueError):
    """An argument outside the values an op is defined for (a distribution's scale <= 0, a probability
    above 1); the message names the op, the argument, the constraint and the values that break it."""

    def __init__(self, op: str, message: str) -> None:
        super().__init__(f"{op}: {message}")
        self.op = op


_BRIEF = reprlib.Repr()
_BRIEF.maxlevel, _BRIEF.maxstring, _BRIEF.maxlong, _BRIEF.maxother = 3, 60, 40, 60


def brief(value: object) -> str:
    """A short repr of `value` (long strings, containers and numbers cut with "..."), for messages that
    quote a file's contents: a damaged or hostile file can hold a gigabyte string, an object nested
    thousands deep or an integer too long to print, and the error quoting it must stay one line.

    Example:
        >>> brief(list(range(100)))
        '[0, 1, 2, 3, 4, 5, ...]'
    """
    try:
        return _BRIEF.repr(value)
    except (ValueError, RecursionError):  # an int past Python's digit limit
        return f"<a {type(value).__name__} too large to print>"
