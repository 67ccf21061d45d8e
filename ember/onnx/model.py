"""`load`: an ONNX model as an ember `Module` whose initializers are its parameters.

The module runs the graph with ember's ops on its device at every call (nothing is compiled ahead),
so dynamic dimensions take any size, and on an autodiff device the float initializers (Params) get
gradients: an imported model can be fine-tuned. Integer initializers (shapes, indices) are buffers.
Constant quantized weights of the matmuls are layers in `quantized` (`ember.onnx.qrewrite`), their
ONNX initializers not loaded.

Example:
    >>> model = load("model.onnx", device=Device.cpu())
    >>> (logits,) = model(np.zeros((2, 3), np.float32))
    >>> model.run({"input": x})["logits"]
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..device import Device
from ..nn.module import Module
from ..nn.param import Param
from ..tensor import Tensor
from . import proto, values
from .errors import OnnxError, UnsupportedOnnxError, require_onnx
from .graph import Parser, _domain, elem_code, value_types
from .qrewrite import rewrite


class OnnxModel(Module):
    """An ONNX graph as a Module: `model(*inputs)` returns the outputs as a tuple, `model.run(feeds)`
    takes and returns dicts by name. Float initializers are in `initializers` as Params, the layers
    made of quantized weights in `quantized` (`QuantLinear`, `IntegerLinear`) by their weight's name."""

    def __init__(self, graph, initializers: dict[str, Tensor], input_names: list[str],
                 output_names: list[str], device: Device, output_types: list | None = None,
                 quantized: dict[str, Module] | None = None) -> None:
        self.initializers = initializers
        self.quantized = dict(quantized or {})
        self._graph, self._device = graph, device
        # integer initializers (shapes, indices) on the host, where the graph's shape computations run
        self._host = {name: v.to(Device.numpy()) for name, v in initializers.items()
                      if isinstance(v, Tensor) and not v.dtype.is_float}
        self.input_names, self.output_names = input_names, output_names
        self._output_types = output_types or [None] * len(output_names)

    @property
    def device(self) -> Device:
        for value in self.initializers.values():
            return value.device
        for layer in self.quantized.values():
            for _, buffer in layer.named_buffers():
                return buffer.device
        return self._device

    def forward(self, *inputs) -> tuple:
        if len(inputs) > len(self.input_names):
            raise OnnxError(f"OnnxModel: {len(inputs)} inputs given, the graph takes {len(self.input_names)} "
                            f"({', '.join(self.input_names)})")
        if len(inputs) < len(self.input_names):
            missing = self.input_names[len(inputs):]
            raise OnnxError(f"OnnxModel: missing input(s) {', '.join(missing)}; the graph takes "
                            f"{', '.join(self.input_names)}")
        return tuple(self._run(dict(zip(self.input_names, inputs))))

    def run(self, feeds: dict[str, Any]) -> dict[str, Any]:
        """The outputs by name for inputs by name (initializers with an input of their name included)."""
        unknown = set(feeds) - set(self._graph.inputs)
        if unknown:
            raise OnnxError(f"OnnxModel.run: unknown input(s) {', '.join(sorted(unknown))}; the graph takes "
                            f"{', '.join(self.input_names)}")
        return dict(zip(self.output_names, self._run(feeds)))

    def _run(self, feeds: dict[str, Any]) -> list:
        device = self.device
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise OnnxError(f"OnnxModel.run: missing input(s) {', '.join(missing)}")
        named = dict(self.initializers)
        named.update(self.quantized)
        named.update({name: _value(v, device, name) for name, v in feeds.items()})
        if self._host is None or any(n in self._host for n in feeds):  # a fed initializer is no constant
            outputs = self._graph.run([], device, named=named)
        else:
            outputs = self._graph.run([], device, named=named, host=self._host)
        return [values.to_output(v, code) for v, code in zip(outputs, self._output_types)]


def _value(v, device: Device, name: str):
    """An input as graph values: arrays and numbers become tensors (of their holder dtype where ember
    emulates the type), strings host arrays, lists sequences, None stays."""
    if v is None or isinstance(v, Tensor):
        return v
    if isinstance(v, (list, tuple)):
        return [_value(item, device, name) for item in v]
    try:
        return values.to_value(v, device)
    except ValueError as e:
        raise UnsupportedOnnxError("<input>", None, name, f"an input of {e}") from None


def load(model, device: Device | str | None = None) -> OnnxModel:
    """An ONNX model (a path, its bytes, or an `onnx.ModelProto`) as an ember Module on `device`
    (default: `Device.default()`); external-data files are read from beside a path.

    Raises:
        OnnxError: the file or an external-data file cannot be read.
        UnsupportedOnnxError: (when run) an op, attribute or dtype ember does not support.
    """
    onnx = require_onnx()
    device = Device.default() if device is None else (Device(device) if isinstance(device, str) else device)
    base_dir = None
    if isinstance(model, (str, os.PathLike)):
        base_dir = str(Path(model).parent)
        try:
            m = onnx.load(os.fspath(model), load_external_data=False)
        except (OSError, Exception) as e:  # noqa: B014  (protobuf's DecodeError is no OSError)
            raise OnnxError(f"load: cannot read the ONNX model {os.fspath(model)!r}: {e}") from e
    elif isinstance(model, (bytes, bytearray)):
        m = onnx.load_from_string(bytes(model))
    elif isinstance(model, onnx.ModelProto):
        m = model
    else:
        raise TypeError(f"load: expected a path, bytes or onnx.ModelProto, got {type(model).__name__}")
    return _module(m, device, base_dir)


def _module(m, device: Device, base_dir: str | None) -> OnnxModel:
    opsets = {_domain(o.domain): o.version for o in m.opset_import}
    functions = {(_domain(f.domain), f.name): f for f in m.functions}
    parser = Parser(opsets, functions, value_types(m), base_dir)
    graph = parser.graph(m.graph, with_initializers=False)
    fed = {i.name for i in m.graph.input}  # an initializer that is also an input can be fed: no constant
    constants = {t.name: t for t in m.graph.initializer if t.name not in fed}
    layers, unused = rewrite(graph, constants, lambda name: _array(constants[name], base_dir), device)
    initializers: dict[str, Tensor] = {}
    for t in m.graph.initializer:
        if t.name not in unused:
            initializers[t.name] = _initializer(t, device, base_dir)
    inputs = [i.name for i in m.graph.input if i.name not in initializers]
    types = [elem_code(o.type) for o in m.graph.output]
    return OnnxModel(graph, initializers, inputs, graph.outputs, device, types, layers)


def _initializer(t, device: Device, base_dir: str | None):
    if values.holder(t.data_type) is None and t.data_type != values.STRING:
        raise UnsupportedOnnxError("<initializer>", None, t.name,
                                   f"initializer of element type {proto.type_name(t.data_type)}, which ember "
                                   "neither holds nor emulates")
    value = values.to_value(_array(t, base_dir), device)
    # only held float types train: an emulated float8 decoded to f32 is a buffer
    return Param(value) if proto.dtype_of(t.data_type) is not None and value.dtype.is_float else value


def _array(t, base_dir: str | None):
    try:
        return proto.to_array(t, base_dir)
    except Exception as e:  # OSError, or onnx's ValidationError for a missing external-data file
        raise OnnxError(f"load: initializer {t.name!r}: cannot read its data ({e})") from e
