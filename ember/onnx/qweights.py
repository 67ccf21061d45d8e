"""Constant quantized weights of an ONNX graph in ember's terms, made once at import (docs/onnx.md,
"Quantized graphs").

- `linear_weight(codes, code, scales, zeros, block, device)`: codes of a weight in Linear layout
  (n, k) with ONNX's scales and zero points (per tensor (1,), per row (n, 1), per block of k (n, nb))
  as a `QuantLinear` (a `QTensor` weight, run by `quant_matmul`), or None where no ember scheme holds
  them. Signed codes with zero points 0 and unsigned ones with zero points at the midpoint are
  symmetric; other zero points make the scheme affine (signed codes shifted into unsigned ones, with
  their zero points: exact).
- `dequantized_weight(...)`: a DequantizeLinear of MatMul's or Gemm's B as such a weight;
  `nbits_weight(...)`: com.microsoft MatMulNBits' packed blocks as one.
- `IntegerLinear`: a constant int8/uint8 B of MatMulInteger, QLinearMatMul or QGemm, run by
  `int_matmul` with the zero points of both operands exact in int32.

Example:
    >>> layer = linear_weight(np.array([[1, -2, 3]]), INT8, np.array([0.5], np.float32), None, None, device)
    >>> layer.weight.scheme
    int8(per tensor, f32 scales)
"""

from __future__ import annotations

import numpy as np

from ..api.creation import tensor
from ..api.quantize import QTensor
from ..dtype import i8, i32
from ..nn.functional import int_linear
from ..nn.module import Module
from ..qscheme import QuantScheme, reference
from ..quant import QuantLinear
from ..tensor import Tensor

INT8, UINT8 = 3, 2
INTEGER = {3: (8, True), 2: (8, False), 22: (4, True), 21: (4, False), 26: (2, True), 25: (2, False)}
"""ONNX integer element type -> (bits, signed), for the codes ember's quantized matmul reads."""
FLOAT8 = {17: "fp8_e4m3", 19: "fp8_e5m2"}
"""ONNX float8 element types with an ember code (float8e4m3fn, float8e5m2)."""
UNSIGNED = {8: 2, 4: 21, 2: 25}
"""bits -> the ONNX unsigned integer type (MatMulNBits' codes)."""
_SCALES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}


def linear_weight(codes: np.ndarray, code: int, scales: np.ndarray, zeros: np.ndarray | None, block: int | None,
                  device) -> QuantLinear | None:
    """A `QuantLinear` of codes (n, k) of ONNX type `code` with scales (and zero points) (1,) per tensor,
    (n, 1) per row or (n, blocks) per `block` codes of a row; None where ember has no such scheme."""
    n, k = codes.shape
    param = _SCALES.get(scales.dtype.name)
    level = ({"level": "block", "block": int(block)} if block else
             {"level": "tensor"} if scales.shape == (1,) else {"level": "channel", "axis": 0})
    if param is None or code not in INTEGER and code not in FLOAT8:
        return None
    if code in FLOAT8:
        if zeros is not None and np.any(zeros.astype(np.float32) != 0):
            return None
        scheme = QuantScheme(FLOAT8[code], param=param, **level)
        parts = {"values": codes.view(np.uint8)}
    else:
        bits, signed = INTEGER[code]
        mid = 1 << (bits - 1)
        c = codes.astype(np.int32)
        z = np.zeros(scales.shape, np.int32) if zeros is None else zeros.astype(np.int32).reshape(scales.shape)
        symmetric = np.all(z == (0 if signed else mid))
        scheme = QuantScheme(f"int{bits}", param=param, mode="symmetric" if symmetric else "affine", **level)
        if symmetric:  # two's complement patterns: signed codes as they are, unsigned ones less the midpoint
            patterns = (c - (0 if signed else mid)) & ((1 << bits) - 1)
            parts = {"values": reference.pack(patterns.astype(np.uint8), bits)}
        else:  # c - z = (c + mid) - (z + mid) for signed codes: unsigned codes and zero points, exact
            shift = mid if signed else 0
            parts = {"values": reference.pack((c + shift).astype(np.uint8), bits),
                     "zeros": (z + shift).astype(np.uint8).reshape(scheme.parts((n, k))["zeros"])}
    parts["scales"] = scales.reshape(scheme.parts((n, k))["scales"])
    return QuantLinear(QTensor(scheme, (n, k), {name: tensor(np.ascontiguousarray(a), device=device)
                                                for name, a in parts.items()}))


def dequantized_weight(q: np.ndarray, code: int, scale: np.ndarray, zero: np.ndarray | None, axis: int,
                       block: int, transposed: bool, device) -> QuantLinear | None:
    """DequantizeLinear(q, scale, zero, axis, block_size) as the B of MatMul (q (k, n)) or of Gemm with
    transB (`transposed`: q (n, k)), or None where its scales run along k one by one or block n."""
    if q.ndim != 2:
        return None
    codes = q if transposed else q.T
    k_axis = 1 if transposed else 0
    axis %= 2
    if block and scale.ndim == 2:  # (blocks, n), or (n, blocks) for Gemm's transposed B
        if axis != k_axis:
            return None
        rows = scale if transposed else scale.T
        return linear_weight(codes, code, rows, None if zero is None else zero if transposed else zero.T, block,
                             device)
    if scale.size == 1:
        return linear_weight(codes, code, scale.reshape(1), None if zero is None else zero.reshape(1), None, device)
    if scale.ndim != 1 or axis == k_axis:
        return None
    return linear_weight(codes, code, scale.reshape(-1, 1), None if zero is None else zero.reshape(-1, 1), None,
                         device)


def nbits_codes(b: np.ndarray, scales: np.ndarray, zeros: np.ndarray | None, k: int, n: int, bits: int,
                block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """MatMulNBits' B (n, blocks, blob) as (codes (n, k), scales (n, blocks), f32 zero points (n, blocks)):
    packed uint8 zero points unpacked, float ones as given, 2^(bits-1) where there are none."""
    nb = -(-k // block)
    codes = reference.unpack(np.ascontiguousarray(b, np.uint8).reshape(n, -1), bits, nb * block)[:, :k]
    if zeros is None:
        z = np.full((n, nb), 1 << (bits - 1), np.float32)
    elif zeros.dtype == np.uint8:
        z = reference.unpack(zeros.reshape(n, -1), bits, nb).astype(np.float32)
    else:
        z = zeros.astype(np.float32).reshape(n, nb)
    return codes.astype(np.int32), scales.reshape(n, nb), z


def nbits_weight(b: np.ndarray, scales: np.ndarray, zeros: np.ndarray | None, k: int, n: int, bits: int,
                 block: int, device) -> QuantLinear | None:
    """com.microsoft MatMulNBits' weight as a `QuantLinear` (unsigned codes less their zero points,
    blocks of `block` along k), or None where it has no ember scheme (float zero points that are not
    codes)."""
    if bits not in UNSIGNED:
        return None
    codes, scales, z = nbits_codes(b, scales, zeros, k, n, bits, block)
    if np.any(z != np.round(z)) or np.any(z < 0) or np.any(z >= 1 << bits):
        return None
    return linear_weight(codes, UNSIGNED[bits], scales, z.astype(np.int32), block, device)


class IntegerLinear(Module):
    """A constant integer weight B (k, n) of ONNX type int8 or uint8 with its zero points: `layer(a, a_zero)`
    is `(a - a_zero) @ (B - b_zero)` in int32, exact, for int8 or uint8 codes a (..., k). It runs
    `int_matmul` of int8 operands (uint8 ones less 128, their zero points too) and subtracts the zero
    points' terms: (a - za)(b - zb) summed over k is a.b - za * sum(b) - zb * sum(a) + k * za * zb.

    `scale` keeps B's float scale (per tensor or per column) for QLinearMatMul and QGemm."""

    def __init__(self, b: np.ndarray, zero: np.ndarray | None, scale: np.ndarray | None, device) -> None:
        signed = b.dtype == np.int8
        w = b.T.astype(np.int32) - (0 if signed else 128)
        z = (np.zeros(1, np.int32) if zero is None else zero.astype(np.int32).reshape(-1)) - (0 if signed else 128)
        self.in_features, self.out_features = b.shape
        self.weight = tensor(np.ascontiguousarray(w.astype(np.int8)), device=device)
        self.sums = tensor(w.sum(1, dtype=np.int64).astype(np.int32), device=device)
        self.zero = None if not np.any(z) else tensor(z, device=device)
        self.k_zero = None if self.zero is None else tensor(z * b.shape[0], device=device)
        self.scale = None if scale is None else tensor(scale.reshape(-1), device=device)

    def forward(self, a: Tensor, a_zero: Tensor | None = None) -> Tensor:
        a8, za = _signed(a, a_zero)
        acc = int_linear(a8, self.weight)
        if za is not None:
            acc = acc - za * self.sums
        if self.zero is not None:
            acc = acc - a8.cast(i32).sum(-1, keepdim=True).cast(i32) * self.zero
            if za is not None:
                acc = acc + za * self.k_zero
        return acc

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, int8"


def _signed(a: Tensor, zero: Tensor | None) -> tuple[Tensor, Tensor | int | None]:
    """int8 codes and a zero point (an i32 tensor, a number, None for 0) with a - zero unchanged:
    uint8 codes and zero points less 128."""
    z = None if zero is None else zero.cast(i32)
    if z is not None and z.numel > 1:
        z = z.reshape(-1, 1)  # one zero point a row of a
    elif z is not None:
        z = z.reshape(())
    if a.dtype == i8:
        return a, z
    a8 = (a.cast(i32) - 128).cast(i8)
    return a8, (z - 128) if z is not None else -128
