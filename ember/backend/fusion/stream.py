"""Recording: lazy handles and the stream of ops waiting to run.

A `LazyHandle` is what the fusion backend gives out instead of data. It is either *concrete*
(`value` holds the inner backend's array) or *pending* (`record` is the op that will compute it).
A `Record` holds its inputs (earlier records of the same stream, or concrete arrays) and only a weak
reference to its handle: a record whose handle nobody holds any more at a sync point is never
written to memory, and is not computed at all unless a later op needs it.

While it records, the stream also builds the op's part of the block's normalized key (relative ids,
dtypes, shape classes) as one interned number per op, so a sync point can look a plan up without
walking the graph again: the key is those numbers and the records' liveness, as bytes.

Example:
    >>> stream = Stream(static_params)
    >>> h = stream.record(registry["exp"], (LazyHandle.concrete(x, aval),), {}, aval)
    >>> h.record.index, len(stream.records)
    (0, 1)
"""

from __future__ import annotations

import threading
import weakref
from array import array
from typing import Any, Sequence

from ...ops.primitive import Aval, Primitive


class LazyHandle:
    """A fusion backend handle: concrete (`value`) or pending (`record`)."""

    __slots__ = ("aval", "value", "record", "__weakref__")

    def __init__(self, aval: Aval, value: Any = None, record: "Record | None" = None) -> None:
        self.aval = aval
        self.value = value
        self.record = record

    @staticmethod
    def concrete(value: Any, aval: Aval) -> "LazyHandle":
        """A handle around data the inner backend already holds."""
        return LazyHandle(aval, value)


class Record:
    """One recorded op (made by `Stream.record` only): `prim(*inputs, **params)` giving `aval`, where
    `inputs` are `Record`s of the same `stream` or concrete inner arrays; `index` is its position in
    the stream and `out` a weak reference to its handle."""

    __slots__ = ("prim", "params", "inputs", "aval", "out", "index", "stream")

    def live(self) -> bool:
        """Whether someone outside the stream still holds this op's handle."""
        return self.out() is not None


def shape_class(shape: tuple, sizes: dict) -> tuple:
    """`shape` with every size other than 0 and 1 replaced by a symbol numbered by first appearance.

    Two blocks with the same classes have the same broadcasting structure (equal sizes stay equal),
    so a plan made for one is valid for the other: a new batch size replays the same plan.

    Example:
        >>> sizes = {}
        >>> shape_class((128, 512), sizes), shape_class((1, 512), sizes), shape_class((64,), sizes)
        ((2, 3), (1, 3), (4,))
    """
    out = []
    for n in shape:
        if n > 1:
            symbol = sizes.get(n)
            if symbol is None:
                symbol = sizes[n] = len(sizes) + 2
            n = symbol
        out.append(n)
    return tuple(out)


_new = object.__new__
_ref = weakref.ref

# Each distinct key part gets a small int once, so a block's key is a string of ints: hashing and
# comparing it at a sync point costs little more than its length. The numbering is shared by every
# stream (the plan cache is), so a number means the same part in every thread's keys.
_PARTS: dict[tuple, int] = {}
_PARTS_LOCK = threading.Lock()


def _number(part: tuple) -> int:
    """The number of a key part not seen before (under the lock: two threads never share a number)."""
    with _PARTS_LOCK:
        return _PARTS.setdefault(part, len(_PARTS))


class Stream:
    """The ops one thread recorded since its last sync point, with the block's normalized key built
    alongside. Whoever records into or flushes a stream holds its `lock`.

    `static_params(prim, params)` gives the part of an op's params that a plan depends on (params of
    ops that run through the inner backend are read afresh at every replay, so they stay out).
    """

    def __init__(self, static_params) -> None:
        self.static_params = static_params
        self.lock = threading.RLock()
        self.records: list[Record] = []
        self.externals: list = []        # concrete arrays read by the block, each once
        self.external_avals: list[Aval] = []
        self._slots: dict[int, tuple] = {}  # id(array) -> ("x", position in externals)
        self._sizes: dict[int, int] = {}
        self._classes: dict[tuple, tuple] = {}  # shape -> shape class, in this block
        self._key = array("I")
        self.held = 0
        """Bytes of the externals the block reads: it holds them until it has run (`ops.starts_block`)."""

    def __len__(self) -> int:
        return len(self.records)

    def record(self, prim: Primitive, handles: Sequence[LazyHandle], params: dict, aval: Aval) -> LazyHandle:
        """Append `prim(handles)` and return its pending handle."""
        records = self.records
        index = len(records)
        inputs, refs = [], []
        for h in handles:
            rec = h.record
            if rec is not None:
                inputs.append(rec)
                refs.append(rec.index - index)  # negative: how many ops back
            else:
                value = h.value
                inputs.append(value)
                slot = self._slots.get(id(value))
                refs.append(slot if slot is not None else self._external(value, h.aval))
        shape_class = self._classes.get(aval.shape) or self._class(aval.shape)
        part = (prim.name, self.static_params(prim, params) if params else (), tuple(refs), aval.dtype, shape_class)
        number = _PARTS.get(part)
        self._key.append(number if number is not None else _number(part))
        # Built field by field: no __init__ frames on the dispatch hot path (two per recorded op).
        handle = _new(LazyHandle)
        handle.aval, handle.value = aval, None
        rec = _new(Record)
        rec.prim, rec.params, rec.inputs, rec.aval, rec.index, rec.stream = prim, params, tuple(inputs), aval, index, self
        rec.out = _ref(handle)
        handle.record = rec
        records.append(rec)
        return handle

    def _external(self, array: Any, aval: Aval) -> tuple:
        slot = self._slots[id(array)] = ("x", len(self.externals))
        self.externals.append(array)
        self.held += getattr(array, "nbytes", 0)
        self.external_avals.append(aval)
        part = ("input", aval.dtype, self._class(aval.shape))
        number = _PARTS.get(part)
        self._key.append(number if number is not None else _number(part))
        return slot

    def _class(self, shape: tuple) -> tuple:
        found = self._classes.get(shape)
        if found is None:
            found = self._classes[shape] = shape_class(shape, self._sizes)
        return found

    def take(self) -> tuple[list[Record], list, list[Aval], bytes, tuple]:
        """(records, externals, their avals, which records' handles are still held (1) or not (0), the
        block's key with that liveness) of the block; the stream is emptied."""
        live = bytes([rec.out() is not None for rec in self.records])
        block = (self.records, self.externals, self.external_avals, live, (self._key.tobytes(), live))
        self.records, self.externals, self.external_avals, self._key = [], [], [], array("I")
        self._slots, self._sizes, self._classes = {}, {}, {}
        self.held = 0
        return block
