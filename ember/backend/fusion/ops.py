"""Which primitives the fusion backend records, which fuse, and the kernel IR each fusing one becomes.

Recorded (run at the next sync point, not at the call):

- elementwise ops, which fuse: the op-table rows the inner target generates code for
  (`FusionTarget.elementwise_ops`), `where` and `cast`, computed by the row's cube expression as
  unfused; dtypes its kernel does not compute (`Elementwise.lowers`) run at once.
- reductions that fuse on read: `sum`, `prod`, `amax` and `amin`.
- inner steps, run through the inner backend with the params and shapes of the block being run:
  `INNER` (pure ops whose output shape follows from shapes and params and whose errors all come from
  the shape rule at the call: movement, `matmul` (and `quant_matmul`, `int_matmul`), convolutions,
  pools, `unfold`/`fold`, scans, `argmax`/`argmin`, `argsort`); index ops whose index is host data, or a pending view or `where` of
  it, with every value in range (`index_bounds`, `index_in_range`, checked at the call); custom ops
  declared pure (`backend_extension(..., pure=True)` calls `record_inner`).

A matmul or convolution (`STARTS_BLOCK`) starts a new block when an elementwise op or reduction was
recorded since the previous one and the block is big enough (`starts_block`: half of `[fusion] max_ops`
records, or `HELD_BYTES` of externals). Not recorded, so run at once (their inputs made concrete first):
other index ops (an index out of range raises an IndexError at the call), random ops and `full`, and
custom ops not declared pure. A recorded op that raises when its block runs makes every value of the
block raise when read (`Fusion.data`), with a note naming the op. Why: docs/fusion.md, "Design notes".

Example:
    >>> elementwise(registry["exp"], (f32,)), elementwise(registry["div"], (i32, i32))
    (True, False)
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ...dtype import DType
from ...ops.primitive import Primitive, registry

REDUCTIONS = ("sum", "prod", "amax", "amin")
_OTHER = frozenset(("where", "cast"))  # elementwise primitives outside the op table
INNER = frozenset(("reshape", "permute", "expand", "slice", "flip", "cat", "pad", "slice_assign", "matmul",
                   "conv", "conv_transpose", "conv_weight_grad", "max_pool", "max_pool_indices",
                   "max_pool_grad", "avg_pool",
                   "unfold", "fold", "cumsum", "cumprod", "cumextreme_index", "argmax", "argmin", "argsort",
                   "quant_matmul", "int_matmul"))
"""Primitives recorded as `Inner` steps (see the module docstring for why these and not the others)."""
INDEX_OPS = frozenset(("gather", "index_select", "embedding", "scatter", "index_add"))
"""Ops recorded as `Inner` steps when their index is host data in range (`index_in_range`)."""
MOVEMENT = frozenset(("reshape", "permute", "expand", "slice", "flip"))
"""Movement ops: every output value is a value of their input (a view, or a copy when the strides
cannot express the result)."""
REPLAYABLE = frozenset(("adam_update", "matmul")) | MOVEMENT
"""Other primitives whose `Inner` steps a plan captures (the target's `captured`): the kernel library runs
each as one launch whose constant arguments follow from the inputs' layout alone and which writes its
output whole (the Adam update, whose host-side set-up costs more than its launch when run afresh; a
matmul on CUDA, one cuBLAS call or tensor-core kernel once tuned, likewise; a reshape that copies). A
movement op that makes a view of a device array replays as that view (the Cube target's
`ViewReplay`). A run that is none of these (a matmul on the CPU's BLAS, one that copies an operand
first, a view of a NumPy array) is simply not captured."""
STARTS_BLOCK = frozenset(("matmul", "quant_matmul", "int_matmul", "conv", "conv_transpose", "conv_weight_grad"))
"""`INNER` ops before which the stream is cut (see the module docstring)."""


def records(prim: Primitive, inputs: Sequence, params: dict) -> bool:
    """Whether the fusion backend records `prim` on `inputs` (handles with an `aval`) instead of running
    it: an elementwise op that fuses, a reduction, an `INNER` op, or an index op whose index is in range
    (`index_in_range`). Decided once per primitive where dtypes and data do not matter (the dispatch
    hot path)."""
    known = _RECORDS.get(prim)
    if known is None:
        if prim.name in INDEX_OPS:
            return index_in_range(prim.name, inputs, params)
        return reduction(prim) or elementwise(prim, [h.aval.dtype for h in inputs])
    return known


def index_in_range(name: str, inputs: Sequence, params: dict) -> bool:
    """Whether the values of the index (input 1) of index op `name` are all in range for the dim it
    indexes, as far as host data shows (`index_bounds`): then running the op later cannot raise.

    Example:
        >>> index_in_range("gather", [x, LazyHandle.concrete(np.array([[0, 2]]), aval)], {"dim": 1})
        True
    """
    bounds = handle_bounds(inputs[1], devices=False)
    if bounds is None:
        return False
    shape = inputs[0].aval.shape
    size = shape[0] if name == "embedding" else shape[params["dim"]] if shape else 1
    return bounds is EMPTY or (bounds[0] >= 0 and bounds[1] < size)


EMPTY = ()
"""`index_bounds` of a value with no elements."""


def handle_bounds(handle, devices: bool = True) -> tuple[int, int] | tuple | None:
    """`index_bounds` of what a fusion handle holds or will hold (its pending record, or its value)."""
    return index_bounds(handle.record if handle.record is not None else handle.value, devices=devices)


def index_bounds(value, depth: int = 8, devices: bool = True) -> tuple[int, int] | tuple | None:
    """(min, max) of the integer values `value` (a stream `Record` or a concrete array) will hold, known
    from host data without running anything: a NumPy array's own; with `devices`, a device array's noted
    `bounds` (uploaded from host data: `ember.cube.runtime.arguments.DeviceArray`); a movement op's (`MOVEMENT`)
    its input's; a `where`'s the union of its two choices' (a `masked_fill` of host targets). `EMPTY`
    for no values; None when unknown (data on a device, another op, `depth` records deep).

    Example:
        >>> index_bounds(np.array([3, 1, 2]))
        (1, 3)
    """
    if type(value) is np.ndarray:
        if value.dtype.kind not in "iub":
            return None
        return EMPTY if value.size == 0 else (int(value.min()), int(value.max()))
    if devices:
        known = getattr(value, "bounds", None)  # a device array's, from the host data it was made of
        if known is not None:
            return known
    name = getattr(getattr(value, "prim", None), "name", None)
    if depth == 0 or name is None:
        return None
    if name in MOVEMENT:
        return index_bounds(value.inputs[0], depth - 1, devices)
    if name == "where":
        a, b = (index_bounds(v, depth - 1, devices) for v in value.inputs[1:])
        if a is None or b is None:
            return None
        return b if a is EMPTY else a if b is EMPTY else (min(a[0], b[0]), max(a[1], b[1]))
    return None


HELD_BYTES = 64 << 20
"""Bytes of externals past which a block is cut at its next matmul (see the module docstring)."""


def starts_block(stream, max_ops: int) -> bool:
    """Whether a `STARTS_BLOCK` op recorded next in `stream` (its records since the last sync point)
    cuts the stream first: when the block has `max_ops // 2` records or holds `HELD_BYTES` of
    externals, and an elementwise op or a reduction (an op other than an `INNER` or index one) was
    recorded since the last `STARTS_BLOCK` op (or the sync point)."""
    records = stream.records
    if len(records) < max_ops // 2 and stream.held < HELD_BYTES:
        return False
    for rec in reversed(records):
        prim = rec.prim
        if prim in _STARTS:
            return False
        if prim not in _INNER:
            return True
    return False


def elementwise(prim: Primitive, dtypes: Sequence[DType]) -> bool:
    """Whether `prim` on inputs of `dtypes` fuses into an elementwise kernel."""
    row = _TABLE.get(prim.name)
    return prim.name in _OTHER if row is None else row.computes(dtypes[0])


def replayable(prim: Primitive) -> bool:
    """Whether an `Inner` step of `prim` is captured like an elementwise one (`REPLAYABLE`)."""
    return prim.name in REPLAYABLE


def reduction(prim: Primitive) -> bool:
    """Whether `prim` is a reduction that can read a fused elementwise program."""
    return prim.name in REDUCTIONS


_TABLE: dict = {}  # the elementwise op table (`settle`): primitive name -> row (`computes`, `lowers`)
_RECORDS: dict = {}  # primitive -> whether it is recorded, for those whose answer ignores dtypes
_STARTS: set = set()  # the primitives of STARTS_BLOCK
_INNER: set = set()  # the primitives of INNER and INDEX_OPS (recorded as inner steps)


def settle(table: Mapping) -> None:
    """Take the elementwise op `table` (primitive name -> row with `computes(dtype)` and `lowers`) and
    decide, once, which registered primitives are recorded whatever their dtypes (`records`); the
    fusion backend calls it with its target's `elementwise_ops`. Decisions of `record_inner` stay."""
    if _TABLE:
        return
    _TABLE.update(table)
    for prim in registry.values():
        row = _TABLE.get(prim.name)
        if prim.name in REDUCTIONS or prim.name in _OTHER or prim.name in INNER or (row and row.lowers is None):
            _RECORDS.setdefault(prim, True)
        elif prim.name in INDEX_OPS:
            continue  # depends on the index's data: `records` asks `index_in_range`
        elif row is None:
            _RECORDS.setdefault(prim, False)
        if prim.name in STARTS_BLOCK:
            _STARTS.add(prim)
        if prim.name in INNER or prim.name in INDEX_OPS:
            _INNER.add(prim)


def record_inner(prim: Primitive) -> None:
    """Record `prim`, a primitive registered after the built-in ones, as an inner step of the plan like
    the `INNER` ops: only for a pure op (it reads only its inputs and returns a new array) whose output
    shape and dtype follow from its inputs' and params', and whose errors are all raised at the call
    (by its shape and dtype rules), since a recorded op runs later, at the next sync point.

    Example:
        >>> record_inner(adam_update.primitive)
        >>> records(adam_update.primitive, [p, g, packed, s], {"amsgrad": False, "first": False})
        True
    """
    _RECORDS[prim] = True
    _INNER.add(prim)


def static_params(prim: Primitive, params: dict) -> tuple:
    """The params a plan depends on: those that shape a fused kernel (cast's dtype, reduced dims)."""
    name = prim.name
    if name == "cast":
        return (params["dtype"],)
    if name in REDUCTIONS:
        return (params["dims"], params["keepdim"])
    return ()
