"""Known compositions of primitives, exported as one ONNX op each.

- `Gemm(x, W, b, transB=1)`: `x @ W.T + b` with a 2-D `x` and constant `W`, `b` (`Linear`);
- `Softmax(x, axis)`: `exp(x - amax(x)) / sum(exp(x - amax(x)))` over one dim;
- `LayerNormalization(x, w, b, axis, epsilon)` (opset >= 17): `(x - mean) * rsqrt(var + eps) * w + b`
  over the trailing dims, the affine part optional;
- `Gelu(approximate="tanh")` (opset >= 20): `x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))`;
- `DequantizeLinear` of a quantized weight's codes for its dequantization, and with `MatMul` for
  `quant_matmul` (`quantized.py`).

A composition is taken only where its inner values are used by nothing else. Others (MatMul + Add for
a batched Linear, attention as MatMul / Softmax / MatMul) are their primitives' ops.

Example:
    >>> patterns, absorbed = find_patterns(trace, order, kinds, region_of, 17)
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Callable

import numpy as np

from .quantized import find_dequantized, find_quant_matmuls
from .recurrent import region_inputs
from .trace import Trace


class _Graph:
    """The records with their users, for matching."""

    def __init__(self, t: Trace, order: list[int], kinds: dict, region_of: dict) -> None:
        self.t, self.kinds, self.absorbed = t, kinds, set()
        self.users: dict[int, list[int]] = defaultdict(list)
        for i in order:
            if kinds[i] == "node":
                for j in (region_inputs(region_of[i]) if i in region_of else t.records[i].inputs):
                    self.users[j].append(i)
        for i in t.outputs:
            self.users[i].append(-1)
        self.region_of = region_of

    def op(self, i: int, prim: str):
        """The inputs of record `i` if it is a node of `prim`, else None."""
        rec = self.t.records[i]
        return rec.inputs if rec.prim == prim and self.kinds.get(i) == "node" and i not in self.region_of else None

    def params(self, i: int) -> dict:
        return self.t.records[i].params

    def constant(self, i: int) -> bool:
        return self.kinds.get(i) in ("named", "fold") or (self.kinds.get(i) == "node" and not self.t.records[i].live)

    def scalar(self, i: int) -> float | None:
        """The value of a folded 0-d constant, else None."""
        if self.kinds.get(i) != "fold" or self.t.records[i].aval.shape != ():
            return None
        return float(self.t.values.value(i))

    def private(self, inner: set[int], root: int) -> bool:
        """Whether the values `inner` are nodes used only inside the composition rooted at `root`."""
        allowed = inner | {root}
        return all(self.kinds.get(i) == "node" and i not in self.absorbed and i not in self.region_of
                   and all(u in allowed for u in self.users[i]) for i in inner)

    def either(self, i: int, prim: str, test: Callable[[int, int], bool]):
        """(a, b) for `i = prim(a, b)` or `prim(b, a)` where `test(a, b)` holds, else None."""
        args = self.op(i, prim)
        if args is None:
            return None
        for a, b in (args, args[::-1]):
            if test(a, b):
                return a, b
        return None


def _gemm(g: _Graph, root: int, opset: int):
    def fits(mm, bias):
        args = g.op(mm, "matmul")
        if args is None or not g.constant(bias) or len(g.t.records[bias].aval.shape) != 1:
            return False
        x, wt = args
        w = g.op(wt, "permute")
        return (w is not None and g.params(wt)["dims"] == (1, 0) and g.constant(w[0])
                and len(g.t.records[x].aval.shape) == 2 and g.t.records[x].aval.dtype.is_float)
    found = g.either(root, "add", fits)
    if found is None:
        return None
    mm, bias = found
    x, wt = g.op(mm, "matmul")
    w = g.op(wt, "permute")[0]
    if not g.private({mm, wt}, root):
        return None
    return (lambda b, n: b.node("Gemm", [n[x], n[w], n[bias]], n[root], transB=1)), {mm, wt}


def _softmax(g: _Graph, root: int, opset: int):
    args = g.op(root, "div")
    if args is None:
        return None
    e, total = args
    s, summed = g.op(e, "exp"), g.op(total, "sum")
    if s is None or summed != (e,) or g.op(s[0], "sub") is None:
        return None
    dims = g.params(total)["dims"]
    x, m = g.op(s[0], "sub")
    if (len(dims) != 1 or not g.params(total)["keepdim"] or g.op(m, "amax") != (x,)
            or tuple(g.params(m)["dims"]) != tuple(dims) or not g.params(m)["keepdim"]):
        return None
    inner = {e, total, s[0], m}
    if not g.private(inner, root):
        return None
    return (lambda b, n: b.node("Softmax", [n[x]], n[root], axis=dims[0])), inner


def _mean_of(g: _Graph, i: int):
    """(x, dims, inner) for `i = sum(x, dims, keepdim) / n` with n the count of those dims, else None."""
    args = g.op(i, "div")
    if args is None:
        return None
    total, n = args
    summed = g.op(total, "sum")
    if summed is None or not g.params(total)["keepdim"]:
        return None
    x, dims = summed[0], tuple(g.params(total)["dims"])
    shape = g.t.records[x].aval.shape
    if g.scalar(n) != math.prod(int(shape[d]) for d in dims):
        return None
    return x, dims, {i, total}


def _normalized(g: _Graph, i: int):
    """(x, dims, eps, inner) for `i = (x - mean(x)) * rsqrt(mean((x - mean(x))^2) + eps)`, else None."""
    parts = g.either(i, "mul", lambda c, r: g.op(r, "rsqrt") is not None and g.op(c, "sub") is not None)
    if parts is None:
        return None
    centered, rs = parts
    x, mean = g.op(centered, "sub")
    first = _mean_of(g, mean)
    shifted = g.op(rs, "rsqrt")[0]
    var_eps = g.either(shifted, "add", lambda v, e: g.scalar(e) is not None)
    if first is None or first[0] != x or var_eps is None:
        return None
    second = _mean_of(g, var_eps[0])
    if second is None or g.op(second[0], "mul") != (centered, centered) or second[1] != first[1]:
        return None
    return x, first[1], g.scalar(var_eps[1]), {centered, rs, shifted, second[0]} | first[2] | second[2]


def _layer_norm(g: _Graph, root: int, opset: int):
    if opset < 17:
        return None
    scaled, bias = g.either(root, "add", lambda a, c: g.constant(c)) or (root, None)
    core, weight = g.either(scaled, "mul", lambda a, c: g.constant(c) and _normalized(g, a) is not None) or (scaled, None)
    found = _normalized(g, core)
    if found is None:
        return None
    x, dims, epsilon, inner = found
    shape, axis = g.t.records[x].aval.shape, dims[0]
    normalized = tuple(int(d) for d in shape[axis:])
    if dims != tuple(range(axis, len(shape))) or any(
            p is not None and tuple(g.t.records[p].aval.shape) != normalized for p in (weight, bias)):
        return None
    inner = (inner | {core, scaled}) - {root}
    if not g.private(inner, root):
        return None
    dtype = g.t.records[x].aval.dtype

    def emit(b, n):
        scale = n[weight] if weight is not None else b.const(np.ones(normalized, dtype.np))
        inputs = [n[x], scale] + ([n[bias]] if bias is not None else [])
        b.node("LayerNormalization", inputs, n[root], axis=axis, epsilon=epsilon)
    return emit, inner


def _gelu_tanh(g: _Graph, root: int, opset: int):
    if opset < 20:
        return None

    def is_const(i, value):
        v = g.scalar(i)
        return v is not None and abs(v - value) <= 1e-6 * max(1.0, abs(value))
    found = g.either(root, "mul", lambda half, rest: g.either(half, "mul", lambda x, c: is_const(c, 0.5)) is not None
                     and g.either(rest, "add", lambda th, c: is_const(c, 1.0) and g.op(th, "tanh") is not None)
                     is not None)
    if found is None:
        return None
    half, rest = found
    x, _ = g.either(half, "mul", lambda x, c: is_const(c, 0.5))
    th, _ = g.either(rest, "add", lambda th, c: is_const(c, 1.0))
    scaled = g.op(th, "tanh")[0]
    inner_sum = g.either(scaled, "mul", lambda s, c: is_const(c, math.sqrt(2.0 / math.pi)))
    if inner_sum is None:
        return None
    cubic = g.either(inner_sum[0], "add", lambda a, c: a == x)
    if cubic is None:
        return None
    cube = g.either(cubic[1], "mul", lambda a, c: is_const(c, 0.044715))
    if cube is None or g.either(cube[0], "mul", lambda a, c: c == x and g.op(a, "mul") == (x, x)) is None:
        return None
    square = g.op(cube[0], "mul")[0]
    inner = {half, rest, th, scaled, inner_sum[0], cubic[1], cube[0], square}
    if not g.private(inner, root):
        return None
    return (lambda b, n: b.node("Gelu", [n[x]], n[root], approximate="tanh")), inner


_MATCHERS = (_layer_norm, _gelu_tanh, _softmax, _gemm)


def find_patterns(t: Trace, order: list[int], kinds: dict, region_of: dict, opset: int):
    """({root id: emit(builder, names)}, ids absorbed into a pattern) over the needed nodes."""
    g = _Graph(t, order, kinds, region_of)
    patterns = {}
    for find in (find_dequantized, find_quant_matmuls):
        for root, (emit, inner) in find(t, order, kinds, g.users, opset).items():
            patterns[root] = emit
            g.absorbed |= inner
    for root in reversed(order):
        if kinds[root] != "node" or root in g.absorbed or root in region_of:
            continue
        for matcher in _MATCHERS:
            found = matcher(g, root, opset)
            if found is not None:
                patterns[root], inner = found
                g.absorbed |= inner
                break
    return patterns, g.absorbed
