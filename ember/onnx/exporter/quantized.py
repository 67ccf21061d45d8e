"""Quantized weights (`QTensor`s: `QuantLinear`'s) as ONNX `DequantizeLinear` of their integer codes.

A `QuantLinear` multiplies through the `quant_matmul` primitive, whose record reads the weight's parts:
it becomes a `DequantizeLinear` of the weight and a `MatMul` (`find_quant_matmuls`). Where ember
dequantizes a weight with ordinary ops (unpack, code table, scale), exported as they are those ops
would be a float copy's worth of graph: the trace's value equal to `q.dequantize()` (found by its value
among the records made from `q`'s parts alone) becomes one `DequantizeLinear` of
initializers `<key>.quantized` (int8 / uint8, int4 / uint4 codes in the weight's layout), `<key>.scale`
and, for affine schemes, `<key>.zero_point`; the matmul after it is then `Gemm` or `MatMul` as for a
float weight. Per tensor and per channel int8 need opset 13; blocks (`block_size`) and 4-bit codes
opset 21. Other schemes (int2, fp8, NF4, MXFP4, double quantization) keep the composition.

Example:
    >>> dequantized = find_dequantized(trace, order, kinds, users, opset)   # {root id: (emit, inner ids)}
    >>> products = find_quant_matmuls(trace, order, kinds, users, opset)
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ...api.quantize import QTensor
from ...errors import ExportError
from ...qscheme import reference
from .graph import Builder
from .trace import Trace

_INT_CODES = {("int8", "symmetric"): "INT8", ("int8", "affine"): "UINT8", ("int4", "symmetric"): "INT4",
              ("int4", "affine"): "UINT4"}


def onnx_form(q: QTensor, key: str, opset: int) -> bool:
    """Whether `q` is a DequantizeLinear at `opset`; ExportError when it would be at a newer one."""
    scheme = q.scheme
    if (scheme.value, scheme.mode) not in _INT_CODES or scheme.double_quant or not q.shape:
        return False
    needs = 21 if scheme.level == "block" or scheme.bits == 4 else 13
    if opset < needs:
        raise ExportError(f"export: the {scheme} weight {key!r} is a DequantizeLinear from opset {needs} "
                          f"(block_size and 4-bit codes came in 21); export with opset={needs} or newer")
    return True


def _host(part) -> np.ndarray:
    return np.asarray(part.numpy())


def _parts(q: QTensor) -> dict[str, np.ndarray]:
    return {name: _host(part) for name, part in q.parts.items()}


def _codes(q: QTensor, parts: dict[str, np.ndarray]) -> np.ndarray:
    """The integer codes in the weight's own layout: signed for symmetric schemes, unsigned for affine."""
    scheme = q.scheme
    rows, k = scheme.storage(q.shape)
    codes = reference.unpack(parts["values"], scheme.bits, k).astype(np.int32)
    if scheme.mode == "symmetric":
        half = 2 ** (scheme.bits - 1)
        codes = np.where(codes < half, codes, codes - 2 * half)
    return reference.from_storage(codes, scheme, q.shape)


def _initializer(b: Builder, name: str, array: np.ndarray, code: str) -> str:
    onnx = b.onnx
    dtype = getattr(onnx.TensorProto, code)
    b.initializers.append(onnx.helper.make_tensor(name, dtype, array.shape, array.reshape(-1).tolist()))
    return name


def emitter(q: QTensor, key: str) -> Callable[[Builder, str, object], None]:
    """emit(builder, out, dtype): the DequantizeLinear of `q` into `out`, cast to `dtype` if not f32."""
    scheme, parts = q.scheme, _parts(q)
    code = _INT_CODES[(scheme.value, scheme.mode)]
    ndim = len(q.shape)
    scales = parts["scales"].astype(np.float32)
    zeros = parts.get("zeros")
    attrs: dict = {}
    if scheme.level == "tensor":
        scales, zeros = scales.reshape(()), None if zeros is None else zeros.reshape(())
    elif scheme.level == "channel":
        attrs["axis"] = scheme.axis % ndim
        scales, zeros = scales.reshape(-1), None if zeros is None else zeros.reshape(-1)
    else:
        attrs.update(axis=ndim - 1, block_size=scheme.block)

    done: dict[int, str] = {}  # builder -> the output of its DequantizeLinear (a weight used twice)

    def emit(b: Builder, out: str, dtype) -> None:
        if id(b) in done:
            b.node("Identity", [done[id(b)]], out)
            return
        done[id(b)] = out
        inputs = [_initializer(b, f"{key}.quantized", _codes(q, parts), code), b.const(scales, f"{key}.scale")]
        if zeros is not None:
            inputs.append(_initializer(b, f"{key}.zero_point", zeros.astype(np.int32), code))
        if dtype.name == "f32":
            b.node("DequantizeLinear", inputs, out, **attrs)
        else:
            b.node("Cast", [b.node("DequantizeLinear", inputs, **attrs)], out, to=b.type_of(dtype))
    return emit


def find_dequantized(t: Trace, order: list[int], kinds: dict, users: dict, opset: int) -> dict:
    """{root id: (emit(builder, names), inner ids)} for each value of the trace that is a dequantized
    `QTensor` of `t.qtensors` computed from its parts by records nothing else uses."""
    found: dict = {}
    taken: set[int] = set()
    for key, q in t.qtensors.items():
        if not onnx_form(q, key, opset):
            continue
        part_ids = {p._handle.id for p in q.parts.values()}
        expected = reference.dequantize(_parts(q), q.scheme, q.shape)
        emit = emitter(q, key)
        for root in reversed(order):
            rec = t.records[root]
            if (kinds.get(root) != "node" or rec.live or root in taken or tuple(rec.aval.shape) != q.shape
                    or not rec.aval.dtype.is_float):
                continue
            inner = _ancestors(t, root, kinds, part_ids)
            if inner is None or not _private(inner, root, users):
                continue
            value = t.values.value(root)
            if not np.array_equal(np.asarray(value, np.float32), expected.astype(np.float32)):
                continue
            dtype = rec.aval.dtype
            found[root] = (lambda b, n, emit=emit, root=root, dtype=dtype: emit(b, n[root], dtype)), inner
            taken |= inner | {root}
    return found


def _ancestors(t: Trace, root: int, kinds: dict, part_ids: set[int]) -> set[int] | None:
    """The node records `root` is computed from (not itself), if they reach the parts and nothing live."""
    inner, stack, reached = set(), list(t.records[root].inputs), False
    while stack:
        i = stack.pop()
        if i in part_ids:
            reached = True
            continue
        if i in inner:
            continue
        rec, kind = t.records[i], kinds.get(i)
        if rec.live or kind == "named":
            return None  # another parameter or an input: not a dequantization of these parts alone
        if kind == "node":
            inner.add(i)
            stack.extend(rec.inputs)
    return inner if reached else None


def _private(inner: set[int], root: int, users: dict) -> bool:
    allowed = inner | {root}
    return all(u in allowed for i in inner for u in users.get(i, ()))


def find_quant_matmuls(t: Trace, order: list[int], kinds: dict, users: dict, opset: int) -> dict:
    """{root id: (emit(builder, names), absorbed ids)} for each `quant_matmul` record whose weight is a
    `QTensor` of `t.qtensors` with an ONNX form: `Gemm(x, DequantizeLinear(W), transB=1)` for a 2-D x,
    else `MatMul(x, Transpose(DequantizeLinear(W)))` (the input gradient's `transpose=True`:
    `MatMul(g, DequantizeLinear(W))`). The records between the parts
    and the product (scales made f32) and the parts themselves are absorbed where nothing else uses them."""
    owners = {}
    for key, q in t.qtensors.items():
        owners.update({p._handle.id: (key, q) for p in q.parts.values()})
    found: dict = {}
    emitters: dict[str, Callable] = {}
    for root in order:
        rec = t.records[root]
        if kinds.get(root) != "node" or rec.prim != "quant_matmul" or rec.inputs[1] not in owners:
            continue
        key, q = owners[rec.inputs[1]]
        if not onnx_form(q, key, opset):
            continue
        if key not in emitters:  # one emitter a weight: it reads the parts to the host
            emitters[key] = emitter(q, key)
        emit = emitters[key]
        part_ids = {p._handle.id for p in q.parts.values()}
        between = set()
        for i in rec.inputs[2:]:
            between |= _ancestors(t, i, kinds, part_ids) or set()
            if kinds.get(i) == "node":
                between.add(i)
        absorbed = {i for i in between | part_ids if all(u in between | {root} for u in users.get(i, ()))}
        gemm = not rec.params["transpose"] and len(t.records[rec.inputs[0]].aval.shape) == 2
        bias, out = None, root
        if gemm and len(users.get(root, ())) == 1:  # Linear's `y + bias`: Gemm's C
            (user,) = users[root]
            add = t.records[user]
            other = [i for i in add.inputs if i != root]
            if (add.prim == "add" and len(other) == 1 and kinds.get(other[0]) == "named"
                    and tuple(t.records[other[0]].aval.shape) == (rec.params["n"],)):
                bias, out = other[0], user
                absorbed.add(root)
        dtype = rec.aval.dtype

        def product(b, n, rec=rec, emit=emit, dtype=dtype, gemm=gemm, bias=bias, out=out):
            weight, x = f"{n[out]}.weight", n[rec.inputs[0]]
            emit(b, weight, dtype)
            if rec.params["transpose"]:
                b.node("MatMul", [x, weight], n[out])
            elif gemm:
                b.node("Gemm", [x, weight] + ([n[bias]] if bias is not None else []), n[out], transB=1)
            else:
                b.node("MatMul", [x, b.node("Transpose", [weight], perm=[1, 0])], n[out])
        found[out] = product, absorbed
    return found
