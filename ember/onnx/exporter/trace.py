"""Tracing a module's forward pass on a capture device: the records ONNX export translates.

`trace(module, arrays, dynamic)` runs a copy of `module` (the copy's parameters on a `CaptureDevice`,
the original untouched) on graph inputs holding `arrays`, with the sizes of the `dynamic` axes as
`SymInt`s, and returns a `Trace`: the records, the ids of the inputs and outputs, the state_dict name
of each parameter's record (`key:part` for a `QTensor`'s parts), the `QTensor`s by key, and a
`Region` for each call of a recurrent layer (exported as one ONNX RNN/LSTM/GRU op, whose sequence
length may vary). `verify(first, second)` compares two traces made at
different sizes of the dynamic axes: a size or a constant that changed without being a formula of the
graph's sizes was baked into the trace, and raises `ExportError` naming the model's line.

Example:
    >>> t = trace(Linear(3, 2), [np.ones((4, 3), np.float32)], {0: {0: "batch"}})
    >>> [r.prim for r in t.records if r.live]
    ['input', 'permute', 'matmul', 'add']
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...api.quantize import QTensor
from ...backend.capture import Capture, Record, SymInt, concrete
from ...device import Device
from ...dtype import dtype_of
from ...errors import ExportError
from ...nn.module import Module
from ...nn.rnn import Recurrent
from ...ops.primitive import Aval
from ...tensor import Tensor


class CaptureDevice(Device):
    """A device of one export: its stack is `Capture(NumPy)`; it is its own inner device."""

    __slots__ = ()

    def __new__(cls, backend: Capture) -> "CaptureDevice":
        device = object.__new__(cls)
        device.kind, device.index, device.is_autodiff, device.checkpointing = "numpy", 0, False, None
        device._backend = backend
        return device

    @property
    def inner(self) -> "CaptureDevice":
        return self

    def autodiff(self, checkpointing: str | None = None) -> Device:
        raise ExportError("export traces the forward pass: autodiff (require_grad, backward) is not recorded")

    def __repr__(self) -> str:
        return "CaptureDevice()"


class Region(NamedTuple):
    """A recurrent layer's call: records [start, end) replaced by one ONNX op."""

    module: Recurrent
    start: int
    end: int
    x: int
    state: tuple[int, ...] | None
    outputs: tuple[int, ...]


class Trace(NamedTuple):
    records: list[Record]
    values: Capture
    inputs: list[int]
    outputs: list[int]
    names: dict[int, str]
    regions: list[Region]
    dims: dict[tuple[int, int], int]
    qtensors: dict[str, QTensor]


def _ids(value) -> list[int]:
    """The record ids of the tensors in a (nested) output, in order."""
    if isinstance(value, Tensor):
        return [value._handle.id]
    if isinstance(value, (tuple, list)):
        return [i for v in value for i in _ids(v)]
    if isinstance(value, dict):
        return [i for v in value.values() for i in _ids(v)]
    if value is None:
        return []
    raise ExportError(f"export: the model returned a {type(value).__name__}; outputs must be tensors or "
                      f"tuples, lists or dicts of them")


def _watch_recurrent(model: Module, capture: Capture, regions: list[Region]) -> None:
    """Hooks on each recurrent layer of `model` noting the records its call makes."""
    for _, layer in model.named_modules():
        if not isinstance(layer, Recurrent):
            continue
        starts: list[tuple[int, tuple]] = []

        def before(module, args, starts=starts):
            starts.append((len(capture.records), args))

        def after(module, args, output, starts=starts):
            start, args = starts.pop()
            x = args[0]._handle.id
            state = tuple(_ids(args[1])) if len(args) > 1 and args[1] is not None else None
            regions.append(Region(module, start, len(capture.records), x, state, tuple(_ids(output))))

        layer.register_forward_pre_hook(before)
        layer.register_forward_hook(after)


def trace(module: Module, arrays: list[np.ndarray], dynamic: dict[int, dict[int, str]]) -> Trace:
    """The records of `module(*arrays)` with the axes `dynamic` names ({input: {axis: name}}) symbolic."""
    capture = Capture(Device.numpy().backend)
    device = CaptureDevice(capture)
    model = module.copy().to(device)
    names: dict[int, str] = {}
    qtensors: dict[str, QTensor] = {}
    for name, value in model.state_dict().items():
        if isinstance(value, QTensor):
            qtensors[name] = value
            for part, tensor in value.parts.items():
                names.setdefault(tensor._handle.id, f"{name}:{part}")
        else:
            names.setdefault(value._handle.id, name)
    regions: list[Region] = []
    _watch_recurrent(model, capture, regions)
    inputs, dims = [], {}
    for i, array in enumerate(arrays):
        shape = tuple(SymInt(n, ("dim", i, axis)) if axis in dynamic.get(i, {}) else n
                      for axis, n in enumerate(array.shape))
        dims.update({(i, axis): n for axis, n in enumerate(array.shape)})
        aval = Aval(shape, dtype_of(array.dtype))
        inputs.append(Tensor._make(device, capture.input(array, aval), aval))
    outputs = _ids(model(*inputs))
    return Trace(capture.records, capture, [t._handle.id for t in inputs], outputs, names, regions, dims, qtensors)


def evaluate(expr, dims: dict[tuple[int, int], int]) -> int:
    """The value of a size formula at the input sizes `dims`."""
    if isinstance(expr, int):
        return expr
    if expr[0] == "dim":
        return dims[(expr[1], expr[2])]
    a, b = evaluate(expr[1], dims), evaluate(expr[2], dims)
    return {"add": a + b, "sub": a - b, "mul": a * b, "floordiv": a // b if b else 0, "mod": a % b if b else 0}[expr[0]]


def _sizes_agree(first, second, dims) -> bool:
    """Whether `second` (params of the second trace) is `first`'s size formulas at `dims`."""
    if isinstance(first, SymInt):
        return evaluate(first.expr, dims) == second
    if isinstance(first, (tuple, list)):
        return (isinstance(second, (tuple, list)) and len(first) == len(second)
                and all(_sizes_agree(a, b, dims) for a, b in zip(first, second)))
    if isinstance(first, dict):
        return first.keys() == second.keys() and all(_sizes_agree(first[k], second[k], dims) for k in first)
    if isinstance(first, float) and np.isnan(first):
        return isinstance(second, float) and np.isnan(second)
    return first == second


def _outside(t: Trace) -> list[int]:
    """The ids of `t`'s records outside its regions (a region's outputs count as outside)."""
    inside = {i for r in t.regions for i in range(r.start, r.end) if i not in r.outputs}
    return [i for i in range(len(t.records)) if i not in inside]


def _branching(where: str) -> ExportError:
    return ExportError(f"export: the ops the model runs depend on the size of a dynamic axis (at {where}): Python "
                       f"code that loops or branches on a size cannot be exported with that axis dynamic")


def verify(a: Trace, b: Trace) -> None:
    """Check that trace `b` (made at other sizes of the dynamic axes) is trace `a`'s size formulas at its
    sizes."""
    outside_a, outside_b = _outside(a), _outside(b)
    if len(outside_a) != len(outside_b) or len(a.regions) != len(b.regions):
        first = next((a.records[i] for i, j in zip(outside_a, outside_b) if a.records[i].prim != b.records[j].prim),
                     a.records[outside_a[min(len(outside_a), len(outside_b)) - 1]])
        raise _branching(first.where)
    same = dict(zip(outside_b, outside_a))
    region_outputs = {i for r in a.regions for i in r.outputs}
    for i, j in zip(outside_a, outside_b):
        x, y = a.records[i], b.records[j]
        if i in region_outputs:  # made inside a recurrent call, which is exported whole
            continue
        if x.prim != y.prim or x.inputs != tuple(same.get(k, -1) for k in y.inputs):
            raise _branching(x.where)
        if x.prim == "constant" and not np.array_equal(x.array, y.array, equal_nan=x.array.dtype.kind == "f"):
            raise ExportError(f"export: a constant made at {x.where} depends on the size of a dynamic axis (it "
                              f"differs between traces at different sizes): made on the host from a size, it "
                              f"would be baked into the graph; compute it with tensor ops from the input instead")
        if not _sizes_agree(x.params, y.params, b.dims):
            raise ExportError(f"export: the {x.prim} at {x.where} has sizes {concrete(x.params)} that change with a "
                              f"dynamic axis without following the input's shape (a size read from a host value, "
                              f"or passed through an op that drops size formulas), so the axis cannot be dynamic")


