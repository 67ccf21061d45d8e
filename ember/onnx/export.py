"""`export(module, example_inputs, path)`: an ember module as an ONNX file that onnxruntime runs.

The forward pass is traced on a capture device (`ember/backend/capture.py`), which records each
primitive with its params; the records become ONNX ops, with Linear, LayerNorm, softmax, GELU and the
recurrent layers as their ONNX ops, and the parameters and buffers as initializers named by their
state_dict keys (in a `<file>.data` file beside the model past 2 GiB). `dynamic_axes` ({input or
output name: {axis: name}} or {name: [axes]}) leaves those sizes free: the model is traced again at
each dynamic size + 1, and a size that changed without following the input's shape (Python code
branching on a size, a host-made constant) raises `ExportError` naming the model's line, as does
data-dependent control flow (a host read of a traced value: `.item()`, `bool(t)`, `.tolist()`). The
file is written atomically and passes `onnx.checker.check_model(full_check=True)`. Needs the `onnx`
package: `pip install 'ember[onnx]'`.

Example:
    >>> model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2))
    >>> export(model, ember.randn(3, 4), "mlp.onnx", dynamic_axes={"x": {0: "batch"}}, input_names=["x"])
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import numpy as np

from ..atomic import atomic_open, write_atomic
from ..errors import ExportError, ShapeError
from ..nn.module import Module
from ..tensor import Tensor
from .exporter.build import build
from .exporter.trace import trace, verify

DEFAULT_OPSET = 20
MIN_OPSET = 13
EXTERNAL_DATA_BYTES = 2 ** 31 - 2 ** 26  # initializers past this many bytes go to the external data file
_ALIGN = 4096


def onnx_module():
    """The `onnx` package, or ImportError naming the extra that installs it."""
    try:
        import onnx  # lazy: an optional extra
    except ImportError:
        raise ImportError("ember.onnx needs the onnx package: pip install 'ember[onnx]'") from None
    return onnx


def _arrays(example_inputs) -> list[np.ndarray]:
    items = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    out = []
    for item in items:
        if isinstance(item, Tensor):
            out.append(np.array(item.numpy()))
        elif isinstance(item, np.ndarray):
            out.append(item)
        else:
            raise TypeError(f"export: example inputs must be tensors or NumPy arrays, got {type(item).__name__}")
    return out


def _input_names(module: Module, count: int, given) -> list[str]:
    if given is not None:
        if len(given) != count:
            raise ValueError(f"export: {len(given)} input_names for {count} example inputs")
        return list(given)
    try:
        params = [p.name for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return params[:count] if len(params) >= count else [f"input_{k}" for k in range(count)]


def _axes(dynamic_axes, names: list[str], ranks: list[int], kind: str) -> dict[int, dict[int, str]]:
    """{position: {axis: name}} of the `kind` values named in `dynamic_axes`."""
    out: dict[int, dict[int, str]] = {}
    for k, name in enumerate(names):
        axes = (dynamic_axes or {}).get(name)
        if axes is None:
            continue
        axes = axes if isinstance(axes, dict) else {a: f"{name}_dim{a}" for a in axes}
        for axis, label in axes.items():
            if not -ranks[k] <= axis < ranks[k]:
                raise ShapeError("export", f"dynamic axis {axis} of {kind} {name!r}, which has {ranks[k]} dims")
            out.setdefault(k, {})[axis % ranks[k]] = str(label)
    return out


def _resized(arrays: list[np.ndarray], dynamic: dict[int, dict[int, str]]) -> list[np.ndarray]:
    """The example inputs with each dynamic axis longer, axes of one name alike; two names never share
    both their sizes (an `arange` over one is then told from one over the other)."""
    sizes: dict[str, int] = {}
    for k, axes in dynamic.items():
        for axis, label in axes.items():
            sizes[label] = max(sizes.get(label, 0), arrays[k].shape[axis])
    taken = set()
    for label, n in sizes.items():
        new = n + 1
        while (n, new) in taken:
            new += 1
        taken.add((n, new))
        sizes[label] = new
    out = []
    for k, array in enumerate(arrays):
        for axis, label in dynamic.get(k, {}).items():
            n = array.shape[axis]
            if n == 0:
                raise ShapeError("export", f"dynamic axis {axis} of input {k} has size 0 in the example: give a "
                                           f"non-empty example")
            array = np.take(array, np.arange(sizes[label]) % n, axis=axis)
        out.append(array)
    return out


def _save(onnx, model, path: Path) -> None:
    """Write `model` to `path` atomically, its large initializers in `<path>.data` past the 2 GiB limit."""
    tensors = list(model.graph.initializer)
    if sum(len(t.raw_data) for t in tensors) > EXTERNAL_DATA_BYTES:
        location = path.name + ".data"
        offset = 0
        with atomic_open(path.with_name(location)) as f:
            for tensor in tensors:
                if len(tensor.raw_data) < 1024:
                    continue
                data = tensor.raw_data
                f.write(data)
                onnx.external_data_helper.set_external_data(tensor, location, offset, len(data))
                tensor.data_location = onnx.TensorProto.EXTERNAL
                tensor.ClearField("raw_data")
                pad = -(offset + len(data)) % _ALIGN
                f.write(b"\0" * pad)
                offset += len(data) + pad
    write_atomic(path, model.SerializeToString())


def export(module: Module, example_inputs, path: str | os.PathLike, dynamic_axes: dict | None = None,
           opset: int | None = None, input_names: list[str] | None = None,
           output_names: list[str] | None = None) -> None:
    """Write `module`'s forward pass on `example_inputs` (a tensor or array, or a tuple of them) to the
    ONNX file `path` (see the module docs); `opset` defaults to `DEFAULT_OPSET`."""
    onnx = onnx_module()
    newest = onnx.defs.onnx_opset_version()
    opset = min(DEFAULT_OPSET, newest) if opset is None else opset
    if not MIN_OPSET <= opset <= newest:
        raise ValueError(f"export: opset {opset} is outside {MIN_OPSET} to {newest} (the newest this onnx package "
                         f"knows)")
    arrays = _arrays(example_inputs)
    input_names = _input_names(module, len(arrays), input_names)
    dynamic_in = _axes(dynamic_axes, input_names, [a.ndim for a in arrays], "input")
    first = trace(module, arrays, dynamic_in)
    try:
        count = len(first.outputs)
        output_names = list(output_names) if output_names is not None else [f"output_{k}" for k in range(count)]
        if len(output_names) != count:
            raise ValueError(f"export: {len(output_names)} output_names for the model's {count} outputs")
        stray = sorted(set(dynamic_axes or {}) - set(input_names) - set(output_names))
        if stray:
            raise ValueError(f"export: dynamic_axes names {stray}, which are neither inputs {input_names} nor "
                             f"outputs {output_names}")
        other = [first.records[i].aval.shape for i in first.outputs]
        if dynamic_in:
            second = trace(module, _resized(arrays, dynamic_in), dynamic_in)
            try:
                verify(first, second)
                other = [second.records[i].aval.shape for i in second.outputs]
            finally:
                second.values.close()
        dynamic_out = _axes(dynamic_axes, output_names, [len(first.records[i].aval.shape) for i in first.outputs],
                            "output")
        model = build(onnx, first, other, opset, input_names, output_names, dynamic_in, dynamic_out)
    finally:
        first.values.close()
    path = Path(path)
    _save(onnx, model, path)
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except onnx.checker.ValidationError as e:
        raise ExportError(f"export: the graph written to {path} fails onnx.checker: {e}") from None
