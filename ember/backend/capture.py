"""The capture decorator: runs every primitive on `inner` and records it (Burn's capture device).

Handles are `Captured(value, id, live)`: the inner handle, the index of the `Record` that made it in
`Capture.records`, and whether it depends on a graph input (`live`). Each record keeps the primitive's
name, its input ids, its params and output aval as the tensor layer gave them, and the line of the
model's code that made it. Sizes may be `SymInt`s, ints that also carry the formula they come from
(`("dim", input, axis)`, sums, products...), so a reshape to `(x.shape[0] * 4, -1)` reaches the record
as a formula of the input's size; the inner backend sees plain ints. Reading a live value on the host
(`.item()`, `bool(t)`, `.numpy()`, `.tolist()`) is data-dependent control flow the record cannot hold:
it raises `ExportError` naming the read and the model's line. Values that depend on no input (the
parameters and what is computed from them alone) may be read.

Example:
    >>> capture = Capture(NumpyBackend())
    >>> x = capture.input(np.ones((2, 3), np.float32), Aval((SymInt(2, ("dim", 0, 0)), 3), f32))
    >>> capture.records[capture.execute(registry["exp"], [x], {}, x_aval).id].prim
    'exp'
"""

from __future__ import annotations

import os
import sys
from typing import Any, NamedTuple, Sequence

import numpy as np

from ..errors import ExportError
from ..ops.primitive import Aval, Primitive
from .base import Backend, Decorator

_EMBER = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_MODEL_CODE = tuple(os.path.join(_EMBER, d) + os.sep for d in ("nn", "models", "examples"))
_READS = {"item": ".item()", "tolist": ".tolist()", "numpy": ".numpy()", "__bool__": "bool()",
          "__float__": "float()", "__int__": "int()", "__index__": "use as an index", "__array__": "np.asarray()",
          "__repr__": "repr()", "__iter__": "iteration", "transfer": ".to(another device)"}


class SymInt(int):
    """A size: its value at trace time, and `expr`, the formula of the graph's sizes it comes from.

    Arithmetic with ints keeps the formula (`+ - * // %`, negation); anything else gives plain values.
    Its hash differs from its value's, so the shape rules' memos never answer a symbolic size with a
    plain one.

    Example:
        >>> (SymInt(4, ("dim", 0, 1)) * 3).expr
        ('mul', ('dim', 0, 1), 3)
    """

    def __new__(cls, value: int, expr) -> "SymInt":
        out = int.__new__(cls, value)
        out.expr = expr
        return out

    def __hash__(self) -> int:
        return hash(("sym", int(self), self.expr))

    def __eq__(self, other) -> bool:
        return int(self) == other

    def __ne__(self, other) -> bool:
        return int(self) != other

    def _op(self, name: str, other, value_of):
        if isinstance(other, bool) or not isinstance(other, int):
            return value_of(int(self), other)
        return _sym(value_of(int(self), int(other)), name, self.expr, expr_of(other))

    def _rop(self, name: str, other, value_of):
        if isinstance(other, bool) or not isinstance(other, int):
            return value_of(other, int(self))
        return _sym(value_of(int(other), int(self)), name, expr_of(other), self.expr)

    def __add__(self, o): return self._op("add", o, lambda a, b: a + b)
    def __radd__(self, o): return self._rop("add", o, lambda a, b: a + b)
    def __sub__(self, o): return self._op("sub", o, lambda a, b: a - b)
    def __rsub__(self, o): return self._rop("sub", o, lambda a, b: a - b)
    def __mul__(self, o): return self._op("mul", o, lambda a, b: a * b)
    def __rmul__(self, o): return self._rop("mul", o, lambda a, b: a * b)
    def __floordiv__(self, o): return self._op("floordiv", o, lambda a, b: a // b)
    def __rfloordiv__(self, o): return self._rop("floordiv", o, lambda a, b: a // b)
    def __mod__(self, o): return self._op("mod", o, lambda a, b: a % b)
    def __rmod__(self, o): return self._rop("mod", o, lambda a, b: a % b)
    def __neg__(self): return _sym(-int(self), "sub", 0, self.expr)
    def __pos__(self): return self


def _sym(value: int, name: str, a, b) -> int:
    """The size `value` computed as `name(a, b)`, its formula simplified: identities dropped and
    constant factors merged (`(n * 15) // 5` is `n * 3`); a plain int when no formula is left."""
    if name == "mul" and isinstance(a, int):
        a, b = b, a
    if (name in ("add", "sub") and b == 0) or (name in ("mul", "floordiv") and b == 1):
        expr = a
    elif name == "mul" and b == 0:
        expr = 0
    elif name == "mul" and isinstance(b, int) and isinstance(a, tuple) and a[0] == "mul" and isinstance(a[2], int):
        expr = ("mul", a[1], a[2] * b)
    elif (name == "floordiv" and isinstance(b, int) and b and isinstance(a, tuple) and a[0] == "mul"
          and isinstance(a[2], int) and a[2] % b == 0):
        expr = ("mul", a[1], a[2] // b) if a[2] != b else a[1]
    else:
        expr = (name, a, b)
    return value if isinstance(expr, int) else SymInt(value, expr)


def expr_of(size: int):
    """The formula of a size: its `expr` if symbolic, else the int itself."""
    return size.expr if isinstance(size, SymInt) else int(size)


def concrete(value):
    """`value` (params, shapes) with every `SymInt` replaced by its plain int."""
    if isinstance(value, SymInt):
        return int(value)
    if isinstance(value, tuple):
        return tuple(concrete(v) for v in value)
    if isinstance(value, list):
        return [concrete(v) for v in value]
    if isinstance(value, dict):
        return {k: concrete(v) for k, v in value.items()}
    return value


def is_symbolic(value) -> bool:
    """Whether `value` (params, shapes) holds a `SymInt`."""
    if isinstance(value, SymInt):
        return True
    if isinstance(value, (tuple, list)):
        return any(is_symbolic(v) for v in value)
    if isinstance(value, dict):
        return any(is_symbolic(v) for v in value.values())
    return False


class Record(NamedTuple):
    """One recorded value: `prim` is a primitive's name, "input" or "constant" (`array` holds it)."""

    prim: str
    inputs: tuple[int, ...]
    params: dict
    aval: Aval
    where: str
    live: bool
    array: np.ndarray | None = None


class Captured:
    """A capture handle: the inner value, its record's index and whether a graph input reaches it."""

    __slots__ = ("value", "id", "live")

    def __init__(self, value: Any, id: int, live: bool) -> None:
        self.value, self.id, self.live = value, id, live


class Capture(Decorator):
    """Runs primitives on `inner` and appends a `Record` of each to `records`."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.name = f"capture({inner.name})"
        self.records: list[Record] = []
        self.values: list[Any] = []  # the inner handle of each record's example value

    def _add(self, record: Record, value: Any) -> Captured:
        self.records.append(record)
        self.values.append(value)
        return Captured(value, len(self.records) - 1, record.live)

    def input(self, array: np.ndarray, aval: Aval) -> Captured:
        """A graph input holding `array` (its example value), of `aval` (sizes may be `SymInt`s)."""
        return self._add(Record("input", (), {}, aval, model_line(), True), self.inner.from_host(array))

    def execute(self, prim: Primitive, inputs: Sequence[Captured], params: dict, out: Aval) -> Captured:
        plain_out = Aval(concrete(out.shape), out.dtype)
        value = self.inner.execute(prim, [h.value for h in inputs], concrete(params), plain_out)
        live = any(h.live for h in inputs)
        return self._add(Record(prim.name, tuple(h.id for h in inputs), params, out, model_line(), live), value)

    def from_host(self, array: np.ndarray) -> Captured:
        kept = np.array(array)  # the caller may write to its array later
        from ..dtype import dtype_of
        aval = Aval(kept.shape, dtype_of(kept.dtype))
        return self._add(Record("constant", (), {}, aval, model_line(), False, kept), self.inner.from_host(kept))

    def to_host(self, handle: Captured) -> np.ndarray:
        read = host_read() if handle.live else None
        if read is not None and read != "repr()":  # printing a traced value changes nothing in the graph
            raise ExportError(f"{read} of a traced tensor at {model_line()}: the value depends on the model's "
                              f"inputs, so Python code branching or computing on it (data-dependent control flow) "
                              f"cannot be recorded in the graph; compute it with tensor ops (ember.where, masks) "
                              f"instead")
        return self.inner.to_host(handle.value)

    def value_bounds(self, handle: Captured) -> tuple[int, int] | None:
        # An index check of a live value (embedding ids) reads the example values, not the graph's.
        array = self.inner.to_host(handle.value)
        return (int(array.min()), int(array.max())) if array.size else None

    def value(self, id: int) -> np.ndarray:
        """The example value of record `id` (for constant folding), live or not."""
        return self.inner.to_host(self.values[id])

    def close(self) -> None:
        """Drop the records and values (a capture device may outlive its export in a constant cache)."""
        self.records, self.values = [], []


def model_line() -> str:
    """`file:line (in function)` of the innermost frame of the model's code: the first frame outside
    ember's own machinery (ember/nn, ember/models and ember/examples count as model code)."""
    frame = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if not path.startswith(_EMBER) or path.startswith(_MODEL_CODE):
            return f"{path}:{frame.f_lineno} (in {frame.f_code.co_name})"
        frame = frame.f_back
    return "<unknown>"


def host_read() -> str:
    """The host read being made, from the outermost frame of ember's machinery on the stack."""
    frame, found = sys._getframe(1), "a host read"
    while frame is not None:
        path = frame.f_code.co_filename
        if not path.startswith(_EMBER) or path.startswith(_MODEL_CODE):
            break
        found = _READS.get(frame.f_code.co_name, found)
        frame = frame.f_back
    return found
