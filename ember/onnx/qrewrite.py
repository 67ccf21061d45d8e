"""Quantized patterns of an imported graph mapped onto `ember.quant`'s kernels, once at load.

`rewrite(graph, tensors, read, device)` changes the main graph's nodes in place where a weight is
constant (an initializer the caller cannot feed; its scales and zero points too):

- DequantizeLinear of a weight whose only reader is MatMul's or Gemm's B: the DequantizeLinear goes
  and the matmul runs a `QuantLinear` (a `QTensor` weight, `quant_matmul`): int8/uint8, int4/uint4,
  float8 codes, per tensor, per output column or in blocks along K;
- MatMulInteger, QLinearMatMul and com.microsoft QGemm with a 2-D int8/uint8 B: an `IntegerLinear`
  (`int_matmul`, zero points exact);
- com.microsoft MatMulNBits (2, 4 and 8 bit codes, no group indices): a `QuantLinear` in blocks.

Anything else (a weight computed at run time, scales along K one by one) keeps the op's own exact
function. It returns the layers by the name the rewritten nodes read them under, and the initializers
only the replaced nodes read (the model does not load them).

Example:
    >>> layers, unused = rewrite(graph, {t.name: t for t in model.graph.initializer}, read, device)
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Mapping

import numpy as np

from ..nn.module import Module
from .graph import Graph, Node
from .ops import quant
from .qweights import INT8, UINT8, IntegerLinear, dequantized_weight, nbits_weight


class _Scope:
    """What a rule asks of the graph: constants, their arrays, the readers of each value."""

    def __init__(self, graph: Graph, tensors: Mapping, read: Callable[[str], np.ndarray], device) -> None:
        self.tensors, self.read, self.device = tensors, read, device
        self.readers = Counter(_names_read(graph))
        self.producer = {out: node for node in graph.nodes for out in node.outputs if out}

    def const(self, *names: str) -> bool:
        """Whether every named input (omitted ones aside) is a constant initializer."""
        return all(n == "" or n in self.tensors for n in names)

    def array(self, name: str) -> np.ndarray | None:
        return self.read(name) if name else None

    def code(self, name: str) -> int:
        return self.tensors[name].data_type


def _names_read(graph: Graph):
    """Every value name a node reads or a graph outputs, subgraphs included (they see outer names)."""
    for node in graph.nodes:
        yield from (n for n in node.inputs if n)
        for value in node.attrs.values():
            for sub in value if isinstance(value, list) else [value]:
                if isinstance(sub, Graph):
                    yield from _names_read(sub)
    yield from graph.outputs


def _inputs(node: Node, n: int) -> list[str]:
    return node.inputs + [""] * (n - len(node.inputs))


def _dequantized(node: Node, scope: _Scope):
    """MatMul / Gemm whose B is a DequantizeLinear of constants read by this node alone."""
    a, b, *rest = _inputs(node, 2)
    dq = scope.producer.get(b)
    if dq is None or (dq.domain, dq.op_type) != ("", "DequantizeLinear") or scope.readers[b] != 1:
        return None
    q, scale, zero = _inputs(dq, 3)
    if not scope.const(q, scale, zero) or not q:
        return None
    transposed = node.op_type == "Gemm" and bool(node.attrs.get("transB", 0))
    layer = dequantized_weight(scope.read(q), scope.code(q), scope.read(scale), scope.array(zero),
                               dq.attrs.get("axis", 1), dq.attrs.get("block_size", 0), transposed, scope.device)
    if layer is None:
        return None
    fn = quant.dequantized_gemm if node.op_type == "Gemm" else quant.dequantized_mat_mul
    return layer, [a, None] + rest, fn, dq, (q, scale, zero)


def _integer_b(scope: _Scope, b: str, zero: str, scale: str = "", transposed: bool = False):
    """An `IntegerLinear` of a constant 2-D int8/uint8 B with per-tensor or per-column parameters."""
    if not b or not scope.const(b, zero, scale) or scope.code(b) not in (INT8, UINT8):
        return None
    w = scope.read(b)
    if w.ndim != 2:
        return None
    w = w.T if transposed else w
    z, s = scope.array(zero), scope.array(scale)
    if any(v is not None and v.size not in (1, w.shape[1]) for v in (z, s)):
        return None
    return IntegerLinear(w, z, s, scope.device)


def _mat_mul_integer(node: Node, scope: _Scope):
    a, b, a_zero, b_zero = _inputs(node, 4)
    layer = _integer_b(scope, b, b_zero)
    return None if layer is None else (layer, [a, None, a_zero, ""], node.fn, None, (b, b_zero))


def _q_linear_mat_mul(node: Node, scope: _Scope):
    a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = _inputs(node, 8)
    layer = _integer_b(scope, b, b_zero, b_scale)
    return None if layer is None else (layer, [a, a_scale, a_zero, None, "", "", y_scale, y_zero], node.fn, None,
                                       (b, b_scale, b_zero))


def _q_gemm(node: Node, scope: _Scope):
    a, a_scale, a_zero, b, b_scale, b_zero, c, y_scale, y_zero = _inputs(node, 9)
    layer = _integer_b(scope, b, b_zero, b_scale, bool(node.attrs.get("transB", 0)))
    return None if layer is None else (layer, [a, a_scale, a_zero, None, "", "", c, y_scale, y_zero], node.fn, None,
                                       (b, b_scale, b_zero))


def _mat_mul_nbits(node: Node, scope: _Scope):
    a, b, scales, zeros, g_idx, bias = _inputs(node, 6)
    attrs = node.attrs
    if g_idx or attrs.get("weight_prepacked", 0) or not b or not scope.const(b, scales, zeros):
        return None
    w = scope.read(b)
    if w.size == 0:
        return None
    layer = nbits_weight(w, scope.read(scales), scope.array(zeros), attrs["K"], attrs["N"], attrs.get("bits", 4),
                         attrs["block_size"], scope.device)
    return None if layer is None else (layer, [a, None, "", "", "", bias], node.fn, None, (b, scales, zeros))


RULES = {("", "MatMul"): _dequantized, ("", "Gemm"): _dequantized, ("", "MatMulInteger"): _mat_mul_integer,
         ("", "QLinearMatMul"): _q_linear_mat_mul, ("com.microsoft", "QGemm"): _q_gemm,
         ("com.microsoft", "MatMulNBits"): _mat_mul_nbits}
"""(domain, op type) -> the rule: (layer, the node's new inputs with None where the layer goes, its
function, a producer node that goes, the initializers it no longer reads), or None."""


def rewrite(graph: Graph, tensors: Mapping, read: Callable[[str], np.ndarray],
            device) -> tuple[dict[str, Module], set[str]]:
    """Rewrite `graph`'s quantized patterns over constant initializers `tensors` (name -> TensorProto,
    `read(name)` its array); the layers by name (their weight's, where nothing else reads it) and the
    initializers no node reads any more."""
    scope = _Scope(graph, tensors, read, device)
    found = []
    for node in graph.nodes:
        rule = RULES.get((node.domain, node.op_type))
        match = rule(node, scope) if rule is not None else None
        if match is not None:
            found.append((node, match))
    gone = {id(match[3]) for _, match in found if match[3] is not None}
    graph.nodes[:] = [n for n in graph.nodes if id(n) not in gone]
    for node, (_, inputs, fn, _, _) in found:
        node.inputs = [n or "" for n in inputs]
        node.in_types, node.fn = [None] * len(inputs), fn
    still = set(_names_read(graph)) | set(scope.producer)
    layers: dict[str, Module] = {}
    for node, (layer, inputs, _, _, names) in found:
        key = names[0]
        while key in still or key in layers:
            key += ".quantized"
        layers[key] = layer
        node.inputs = [key if n is None else n for n in inputs]
    released = {n for _, match in found for n in match[4] if n}
    return layers, released - still
