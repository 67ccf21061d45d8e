"""An ONNX graph as ember runs it: nodes in order, each an op function of the table, over a scope.

`parse(graph_proto, opsets, ...)` reads a GraphProto once (attributes decoded, op functions looked
up, ops that ONNX defines as functions with no function of ember's expanded into their bodies);
`Graph.run(inputs, device, outer)` runs it, a subgraph (If, Loop, Scan) seeing its outer scope's names.

Example:
    >>> outputs = parse(model.graph, {"": 17}).run([x], Device.cpu())
"""

from __future__ import annotations

import itertools
from collections import ChainMap
from typing import Any, Mapping

import numpy as np

from . import proto, values
from .errors import OnnxError, require_onnx
from .ops import OPS, Call

_fresh = itertools.count()


class Node:
    """A node read once: op function, decoded attributes, input and output names, opset."""

    __slots__ = ("op_type", "domain", "name", "inputs", "outputs", "attrs", "opset", "fn", "cache",
                 "in_types", "out_types", "narrow")

    def __init__(self, p, opset: int, fn, parse_graph, types: Mapping) -> None:
        self.op_type, self.domain, self.name = p.op_type, _domain(p.domain), p.name
        self.inputs, self.outputs = list(p.input), list(p.output)
        self.attrs = {a.name: proto.attribute(a, parse_graph) for a in p.attribute}
        self.opset, self.fn, self.cache = opset, fn, {}
        self.in_types = [elem_code(types.get(n)) for n in self.inputs]
        self.out_types = [elem_code(types.get(n)) for n in self.outputs]
        # outputs of emulated element types, brought back into their holder and range after the node
        self.narrow = [(i, c) for i, c in enumerate(self.out_types) if c in values.HOLDERS]


# Ops computed on the host (Device.numpy()) when every input is a host value: shape arithmetic, whose
# results Reshape, Slice, Expand... then read without waiting for the device. Shape and Size make host
# values from any input (they read its shape only); Constant from none.
HOST_OPS = frozenset({
    "Abs", "Add", "And", "Cast", "Ceil", "Concat", "ConstantOfShape", "CumSum", "Div", "Equal", "Expand",
    "Flatten", "Floor", "Gather", "GatherElements", "Greater", "GreaterOrEqual", "Identity", "Less",
    "LessOrEqual", "Max", "Min", "Mod", "Mul", "Neg", "Not", "Or", "Range", "ReduceMax", "ReduceMin",
    "ReduceProd", "ReduceSum", "Reshape", "Slice", "Sqrt", "Squeeze", "Sub", "Tile", "Transpose", "Trilu",
    "Unsqueeze", "Where"})
_SHAPE_READS = frozenset({"Shape", "Size"})


class Plan:
    """How one graph runs given the names of its host values (see `Graph.run`): per node whether it runs
    on the host, and which host values are constant (computed once, uploaded once per device)."""

    def __init__(self, nodes: list[Node], host_names: frozenset[str]) -> None:
        host, const = set(host_names), set(host_names)
        self.on_host: list[bool] = []
        for node in nodes:
            ins = [n for n in node.inputs if n]
            if node.domain == "" and node.op_type in _SHAPE_READS:
                here, fixed = True, all(n in const for n in ins)
            elif node.domain == "" and (node.op_type in HOST_OPS or node.op_type == "Constant"):
                here = all(n in host for n in ins)
                fixed = here and all(n in const for n in ins)
            else:
                here = fixed = False
            self.on_host.append(here)
            outs = [n for n in node.outputs if n]
            if here:
                host.update(outs)
            if fixed:
                const.update(outs)
        self.host, self.const = frozenset(host), frozenset(const)


class Graph:
    """Nodes, input and output names, and the graph's own constants (initializers of a subgraph)."""

    def __init__(self, nodes: list[Node], inputs: list[str], outputs: list[str],
                 constants: dict[str, np.ndarray]) -> None:
        self.nodes, self.inputs, self.outputs, self.constants = nodes, inputs, outputs, constants
        self._plans: dict[frozenset, Plan] = {}
        self._fixed: dict[str, Any] = {}  # constant host values, computed at the first run
        self._uploaded: dict[tuple[str, Any], Any] = {}  # (name, device) -> a constant host value there

    def run(self, inputs, device, outer: Mapping[str, Any] | None = None,
            named: Mapping[str, Any] | None = None, host: Mapping[str, Any] | None = None) -> list:
        """The outputs for `inputs` (positional, matched to the graph's inputs) or `named` values.

        `host` names values on `Device.numpy()` that never change between runs (integer initializers).
        Shape computations whose inputs are all host values run on the host (`HOST_OPS`), so reading
        them (a Reshape's shape) does not wait for the device; those made from constants alone run
        once, and reach the device once."""
        env = ChainMap({}, outer) if outer is not None else ChainMap({})
        for name, value in self.constants.items():
            env[name] = _constant(device, value)
        if named:
            env.update(named)
        env.update(zip(self.inputs, inputs))
        host = dict(host or {})
        env.update(host)
        key = frozenset(host)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = Plan(self.nodes, key)
        cpu = _host_device()
        for node, on_host in zip(self.nodes, plan.on_host):
            if on_host and node.outputs and all(n in self._fixed for n in node.outputs if n):
                env.update({n: self._fixed[n] for n in node.outputs if n})
                continue
            if on_host or node.op_type in _SHAPE_READS:
                args = [env[n] if n else None for n in node.inputs]
            else:
                args = [self._to_device(n, env[n], device, plan) if n in plan.host else env[n] if n else None
                        for n in node.inputs]
            out = node.fn(Call(node, cpu if on_host else device, env), *args)
            if not isinstance(out, tuple):
                out = (out,)
            if node.narrow:
                out = list(out)
                for i, code in node.narrow:
                    if i < len(out):
                        out[i] = values.narrow(out[i], code)
            for name, value in zip(node.outputs, out):
                if name:
                    env[name] = value
                    if on_host and name in plan.const and name not in host:
                        self._fixed[name] = value
        return [self._to_device(n, env[n], device, plan) if n in plan.host else env[n] for n in self.outputs]

    def _to_device(self, name: str, value, device, plan: Plan):
        """Host value `name` on `device` (uploaded once if it is constant)."""
        if value is None or device == _host_device():
            return value
        if name not in plan.const:
            return _constant(device, value.numpy())
        found = self._uploaded.get((name, device))
        if found is None:
            found = self._uploaded[(name, device)] = _constant(device, value.numpy())
        return found


def _host_device():
    from ..device import Device
    return Device.numpy()


def _constant(device, value):
    return values.to_value(value, device)


def elem_code(t) -> int | None:
    """The ONNX element type of a TypeProto (of a tensor, or a sequence or optional of tensors)."""
    while t is not None:
        kind = t.WhichOneof("value")
        if kind in ("tensor_type", "sparse_tensor_type"):
            return getattr(t, kind).elem_type or None
        t = t.sequence_type.elem_type if kind == "sequence_type" else (
            t.optional_type.elem_type if kind == "optional_type" else None)
    return None


def _domain(d: str) -> str:
    return "" if d == "ai.onnx" else d


class Parser:
    """Reads graphs of one model: its opsets, local functions and inferred value types."""

    def __init__(self, opsets: dict[str, int], functions: dict, types: dict, base_dir: str | None) -> None:
        self.opsets, self.functions, self.types, self.base_dir = opsets, functions, types, base_dir

    def graph(self, g, opsets: dict[str, int] | None = None, with_initializers: bool = True) -> Graph:
        opsets = opsets or self.opsets
        nodes: list[Node] = []
        for p in g.node:
            self._node(p, opsets, nodes)
        constants = {t.name: proto.to_array(t, self.base_dir) for t in g.initializer} if with_initializers else {}
        for s in g.sparse_initializer:
            constants[s.values.name] = proto._sparse_to_array(s)
        return Graph(nodes, [i.name for i in g.input], [o.name for o in g.output], constants)

    def _node(self, p, opsets: dict[str, int], nodes: list[Node]) -> None:
        domain = _domain(p.domain)
        opset = opsets.get(domain, opsets.get("") if domain == "" else None)
        fn = OPS.get((domain, p.op_type))
        if fn is None:
            body = self._function(p, domain, opset)
            if body is not None:
                fproto, fopsets = body
                for q in expand(p, fproto, self._defaults(p, domain, opset)):
                    self._node(q, {**opsets, **fopsets}, nodes)
                return
            fn = _unsupported
        sub = lambda g: self.graph(g, opsets)  # noqa: E731  (subgraphs keep the model's opsets)
        nodes.append(Node(p, opset, fn, sub, self.types))

    def _function(self, p, domain: str, opset: int | None):
        """(FunctionProto, its opsets) for a model-local function or an ONNX op defined by one."""
        if (domain, p.op_type) in self.functions:
            f = self.functions[(domain, p.op_type)]
            return f, {_domain(o.domain): o.version for o in f.opset_import}
        onnx = require_onnx()
        if opset is None:
            return None
        try:
            schema = onnx.defs.get_schema(p.op_type, opset, domain)
        except Exception:  # onnx.defs.SchemaError: an op the onnx package does not know either
            return None
        f = onnx.FunctionProto()
        versions = [v for v in schema.function_opset_versions if v <= opset]
        if versions:
            f.ParseFromString(schema.get_function_with_opset_version(max(versions)))
        else:
            versions = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
            types = [self.types.get(n) for n in p.input]
            if not versions or any(t is None for t, n in zip(types, p.input) if n):
                return None
            f.ParseFromString(schema.get_context_dependent_function_with_opset_version(
                max(versions), p.SerializeToString(),
                [(t or onnx.TypeProto()).SerializeToString() for t in types]))
        return f, {_domain(o.domain): o.version for o in f.opset_import}

    def _defaults(self, p, domain: str, opset: int | None) -> dict:
        """The attribute defaults of a function op: the local function's or the schema's."""
        if (domain, p.op_type) in self.functions:
            return {a.name: a for a in self.functions[(domain, p.op_type)].attribute_proto}
        schema = require_onnx().defs.get_schema(p.op_type, opset, domain)
        return {name: a.default_value for name, a in schema.attributes.items() if a.default_value.name}


def expand(p, f, defaults: dict) -> list:
    """The nodes of function `f` called by node `p`: formal names bound to the node's, internal names
    made unique, attribute references replaced by the node's attributes (or their defaults)."""
    onnx = require_onnx()
    prefix = f"{p.op_type}_{next(_fresh)}__"
    names = {formal: actual for formal, actual in zip(f.input, p.input)}
    names.update({formal: actual for formal, actual in zip(f.output, p.output) if actual})
    attrs = {**defaults, **{a.name: a for a in p.attribute}}

    internal = set(f.input) | set(f.output) | {n for q in f.node for n in q.output}

    def rename(n: str) -> str:
        return "" if n == "" else names.get(n, prefix + n)

    def node(q, local: set[str]):
        r = onnx.NodeProto()
        r.CopyFrom(q)
        del r.input[:], r.output[:], r.attribute[:]
        ref = lambda n: n if n in local or n not in internal else rename(n)  # noqa: E731
        r.input.extend(ref(n) for n in q.input)
        r.output.extend(n if local else rename(n) for n in q.output)
        for a in q.attribute:
            if a.ref_attr_name:
                if a.ref_attr_name in attrs:
                    b = onnx.AttributeProto()
                    b.CopyFrom(attrs[a.ref_attr_name])
                    b.name = a.name
                    r.attribute.append(b)
            elif a.type == onnx.AttributeProto.GRAPH:
                b = onnx.AttributeProto()
                b.CopyFrom(a)
                inner = {i.name for i in a.g.input} | {t.name for t in a.g.initializer}
                inner |= {n for s in a.g.node for n in s.output}
                del b.g.node[:]
                b.g.node.extend(node(s, (local or set()) | inner) for s in a.g.node)
                for o in b.g.output:
                    o.name = ref(o.name) if o.name not in inner else o.name
                r.attribute.append(b)
            else:
                r.attribute.append(a)
        return r

    return [node(q, set()) for q in f.node]


def _unsupported(call: Call, *inputs):
    call.unsupported("ember has no function for this op type in this domain (an entry of "
                     "ember.onnx.ops.OPS would be needed)")


def value_types(model) -> dict:
    """Name -> TypeProto of every value shape inference can type (for context-dependent functions)."""
    onnx = require_onnx()
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # inference fails on some valid models; types are then only what the model states
        inferred = model
    types = {}

    def walk(g) -> None:
        for v in itertools.chain(g.input, g.output, g.value_info):
            types[v.name] = v.type
        for t in g.initializer:
            types[t.name] = onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims))
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
    walk(inferred.graph)
    return types


def check_value(value, where: str):
    """A value of a run's interface is a tensor, a list of them, or None."""
    if value is None or isinstance(value, list):
        return value
    raise OnnxError(f"{where}: expected a tensor, an array, a list of them or None, got {type(value).__name__}")
