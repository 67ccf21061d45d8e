"""The errors ember raises for bad input, each naming what was wrong.

Every error is an `EmberError`; the shape, dtype, device and memory errors also subclass the built-in
exception a Python user would expect (`ValueError`, `TypeError`, `RuntimeError`, `MemoryError`).

Example:
    >>> raise ShapeError("add", "shapes (2, 3) and (4,) do not broadcast")
    Traceback (most recent call last):
    ember.errors.ShapeError: add: shapes (2, 3) and (4,) do not broadcast
"""

from __future__ import annotations

import functools
import os
import re
import reprlib
import sys
from typing import Callable


class EmberError(Exception):
    """Base of all ember errors."""


class ShapeError(EmberError, ValueError):
    """Shapes that do not fit the op; the message names the op and the shapes."""

    def __init__(self, op: str, message: str) -> None:
        op, message = user_op(op, message)
        super().__init__(f"{op}: {message}")
        self.op = op


class OutOfMemoryError(EmberError, MemoryError):
    """A tensor larger than any memory here can hold, refused before anything is allocated (or a device
    allocation that failed); names the op, the shape, the dtype and the bytes. `except MemoryError`
    catches it."""


class DTypeError(EmberError, TypeError):
    """A dtype the op does not accept, or an unknown dtype name; the message starts with the op."""

    def __init__(self, message: str) -> None:
        prefix = _OP_PREFIX.match(message)
        op, rest = (prefix[1], message[prefix.end():]) if prefix else ("", message)
        called, rest = user_op(op, rest)
        super().__init__(f"{called}: {rest}" if called else message)


class DeviceError(EmberError, RuntimeError):
    """Tensors on two different devices in one op, or an unknown device string."""


class DeviceUnavailableError(DeviceError):
    """A device whose backend cannot run here; the message says what is missing and how to install it."""


class DistributedError(EmberError, RuntimeError):
    """A process group that cannot start or a collective that cannot run: names the backend, the rank
    and what is missing (a launcher's variables, an extra to install, tensors that do not match)."""


class StoreError(EmberError, ValueError):
    """A model file that is truncated, corrupt or of the wrong kind; names the file and the problem."""


class ConfigError(EmberError, ValueError):
    """A bad `ember.toml` key or value, or a bad `EMBER_*` variable; names the key and the file."""


class QuantSchemeError(EmberError, ValueError):
    """A quantization scheme that cannot be built, or that does not fit a tensor; names the scheme and,
    where a tensor is involved, its shape."""


class DomainError(EmberError, ValueError):
    """An argument outside the values an op is defined for (a distribution's scale <= 0, a probability
    above 1); the message names the op, the argument, the constraint and the values that break it."""

    def __init__(self, op: str, message: str) -> None:
        super().__init__(f"{op}: {message}")
        self.op = op


class ExportError(EmberError, RuntimeError):
    """A model that cannot be exported as traced (ONNX export): a host read of a traced value, an op
    with no ONNX form, or a size baked into the graph; names the op and the line of the model's code."""


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


# ---- naming the op the user called ----------------------------------------------------------------------
# A composed op (softmax = amax, sub, exp, sum, div) fails inside one of the ops it calls; the error is to
# name the op the user called. `ShapeError` and `DTypeError` find it when they are made: the outermost
# public op among the ember frames on the stack (the walk stops at the first frame outside the package,
# the user's code). Nothing runs on the path of an op that succeeds.

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_OP_PREFIX = re.compile(r"([A-Za-z_][\w.]*): ")
_NAMESPACES = ("ember", "ember.nn.functional")  # modules whose public functions are ops
_PACKAGES = ("ember.api", "ember.nn.functional")  # packages whose every module's public functions are ops


def public_ops() -> dict[str, list[Callable]]:
    """Every public op by name (one name can be several functions: `ember.api.rowwise.softmax` beside
    `ember.softmax`): the functions of `ember`, `ember.nn.functional` and each module of `ember.api` and
    `ember.nn.functional` (what `Tensor` methods are made of), new ones included.

    Example:
        >>> ember.api.activation.softmax in public_ops()["softmax"]
        True
    """
    import importlib
    import inspect
    import pkgutil
    modules = [importlib.import_module(name) for name in _NAMESPACES]
    for name in _PACKAGES:
        package = importlib.import_module(name)
        modules += [importlib.import_module(f"{name}.{m.name}") for m in pkgutil.iter_modules(package.__path__)
                    if not m.name.startswith("_")]
    ops: dict[str, list[Callable]] = {}
    for module in modules:
        for key, f in vars(module).items():
            # a namespace's re-exports are ops; a module's imported helpers (normalize_dim) are not
            home = "ember." if module.__name__ in _NAMESPACES else module.__name__
            # a shared body with an `op` parameter (conv, max_pool) is told its caller's name: not an op
            if (not key.startswith("_") and inspect.isfunction(f) and f.__module__.startswith(home)
                    and "op" not in inspect.signature(f).parameters):
                name = f.__name__ if vars(module).get(f.__name__) is f else key  # `abs`, not its alias
                if f not in ops.setdefault(name, []):
                    ops[name].append(f)
    return ops


@functools.cache
def _op_codes() -> dict:
    """The code objects of the public ops by name, leaving out code shared by ops of several names
    (a factory's closure, `exp` and `log`): those name their primitive themselves."""
    import inspect
    names: dict = {}
    for name, fs in public_ops().items():
        for f in fs:
            names.setdefault(inspect.unwrap(f).__code__, set()).add(name)
    return {code: next(iter(n)) for code, n in names.items() if len(n) == 1}


def called_op() -> str | None:
    """The op the user called, while one of ember's ops is failing: the outermost public op among the
    frames of the ember package on the stack, or None outside any op."""
    codes, name = _op_codes(), None
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        name = codes.get(frame.f_code, name)
        frame = frame.f_back
    return name


def user_op(op: str, message: str) -> tuple[str, str]:
    """(`op`, `message`) for an error raised by `op`, renamed to the op the user called when `op` ran
    inside it: ("amax", "dim 3 ...") inside softmax -> ("softmax", "dim 3 ... (in amax, inside softmax)")."""
    called = called_op()
    if called is None or called == op:
        return op, message
    return called, f"{message} (in {op}, inside {called})" if op else message


class RemoteError(DeviceError):
    """A remote device (`Device.remote`) refused the connection, or an op failed on its server: the message
    names the server's op and its own error."""


class ProtocolError(RemoteError):
    """A message of the remote protocol was malformed, too large, or not allowed at that point."""
