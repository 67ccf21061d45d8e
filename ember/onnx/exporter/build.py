"""From a verified `Trace` to an ONNX `ModelProto`.

Each record the outputs need becomes one of: a graph input; an initializer named after the module's
state_dict key (parameters and buffers); a folded initializer (values computed from constants alone,
with no size of a dynamic axis in them); the nodes of a
recognised pattern (`patterns.py`: Gemm, LayerNormalization, Softmax, Gelu); one ONNX RNN/LSTM/GRU
op for a recurrent layer's call (`recurrent.py`); or the nodes of its primitive (`ops.py`).

Example:
    >>> model = build(onnx, first, other_shapes, 17, ["x"], ["y"], {0: {0: "batch"}}, {})
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...backend.capture import SymInt, is_symbolic
from .graph import Builder
from .ops import emit
from .patterns import find_patterns
from .recurrent import emit_region, region_inputs
from .trace import Trace


def _needed(t: Trace, region_of: dict) -> list[int]:
    """The ids the outputs depend on, in recording (topological) order."""
    needed, stack = set(), list(t.outputs)
    while stack:
        i = stack.pop()
        if i in needed:
            continue
        needed.add(i)
        region = region_of.get(i)
        stack.extend(region_inputs(region) if region is not None else t.records[i].inputs)
    return sorted(needed)


def _kinds(t: Trace, order: list[int], region_of: dict) -> dict[int, str]:
    """"input", "named", "fold" or "node" for each needed id."""
    kinds: dict[int, str] = {}
    named_below: dict[int, bool] = {}
    dynamic: dict[int, bool] = {}
    for i in order:
        rec = t.records[i]
        named_below[i] = i in t.names or any(named_below.get(j, False) for j in rec.inputs)
        dynamic[i] = is_symbolic(rec.params) or any(dynamic.get(j, False) for j in rec.inputs)
        if rec.prim == "input":
            kinds[i] = "input"
        elif i in t.names:
            kinds[i] = "named"
        elif i in region_of or rec.live or named_below[i] or dynamic[i]:
            kinds[i] = "node"
        else:
            kinds[i] = "fold"
    return kinds


def _value_info(onnx, b: Builder, name: str, dtype, dims: list) -> Any:
    return onnx.helper.make_tensor_value_info(name, b.type_of(dtype), dims)


def _dims(shape: tuple, other: tuple, axis_names: dict[tuple[int, int], str], declared: dict[int, str]) -> list:
    """An output's declared dims: a dynamic axis' name, a size, or None where it varies otherwise."""
    dims = []
    for axis, (n, m) in enumerate(zip(shape, other)):
        if axis in declared:
            dims.append(declared[axis])
        elif isinstance(n, SymInt) and isinstance(n.expr, tuple) and n.expr[0] == "dim":
            dims.append(axis_names[n.expr[1:]])
        else:
            dims.append(int(n) if not isinstance(n, SymInt) and n == m else None)
    return dims


def build(onnx, t: Trace, other_shapes: list[tuple], opset: int, input_names: list[str],
          output_names: list[str], dynamic_in: dict[int, dict[int, str]],
          dynamic_out: dict[int, dict[int, str]]) -> Any:
    """The ONNX model of trace `t` (see the module docs); `other_shapes` are the outputs' shapes in the
    trace at other sizes of the dynamic axes."""
    region_of = {o: r for r in t.regions for o in r.outputs}
    order = _needed(t, region_of)
    kinds = _kinds(t, order, region_of)
    b = Builder(onnx, opset, input_names)
    names: dict[int, str] = {}
    for k, i in enumerate(t.inputs):
        names[i] = input_names[k]
    for i in order:
        if kinds[i] == "named":
            names[i] = t.names[i]
    graph_outputs = []
    for k, i in enumerate(t.outputs):
        if i in names or kinds[i] == "fold" or i in t.outputs[:k]:
            graph_outputs.append((i, output_names[k], True))  # an input, a parameter or a repeat: Identity
        else:
            names[i] = output_names[k]
            graph_outputs.append((i, output_names[k], False))
    for i in order:
        names.setdefault(i, f"v{i}")
    patterns, absorbed = find_patterns(t, order, kinds, region_of, opset)
    done_regions = set()
    for i in order:
        rec, kind = t.records[i], kinds[i]
        if kind in ("named", "fold"):
            if i not in absorbed:  # a quantized weight's parts, absorbed into its DequantizeLinear
                b.const(t.values.value(i), names[i])
        elif kind == "node" and i in region_of:
            region = region_of[i]
            if id(region) not in done_regions:
                done_regions.add(id(region))
                emit_region(b, t, region, names)
        elif kind == "node" and i in patterns:
            patterns[i](b, names)
        elif kind == "node" and i not in absorbed:
            emit(b, rec, [names[j] for j in rec.inputs], [t.records[j].aval for j in rec.inputs], names[i])
    for i, name, copy in graph_outputs:
        if copy:
            b.node("Identity", [names[i]], name)
    axis_names = {(k, axis): name for k, axes in dynamic_in.items() for axis, name in axes.items()}
    inputs = [_value_info(onnx, b, input_names[k], t.records[i].aval.dtype,
                          [dynamic_in.get(k, {}).get(axis, int(n)) for axis, n in enumerate(t.records[i].aval.shape)])
              for k, i in enumerate(t.inputs)]
    outputs = [_value_info(onnx, b, name, t.records[i].aval.dtype,
                           _dims(t.records[i].aval.shape, other_shapes[k], axis_names, dynamic_out.get(k, {})))
               for k, (i, name, _) in enumerate(graph_outputs)]
    used = {name for node in b.nodes for name in node.input}
    initializers = [t for t in b.initializers if t.name in used]  # constants a pattern took in are left out
    graph = onnx.helper.make_graph(b.nodes, "ember", inputs, outputs, initializers)
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)],
                                  producer_name="ember")
