"""Quantized ONNX ops: Quantize/DequantizeLinear (per tensor, per axis, blocked), DynamicQuantizeLinear,
MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv, and onnxruntime's com.microsoft QGemm,
QLinearAdd, QLinearMul and MatMulNBits.

A constant weight of the matmuls arrives as the layer `ember.onnx.qrewrite` made of it at load
(`IntegerLinear`: `int_matmul`; `QuantLinear`: `quant_matmul`), which the functions here call; an
operand computed at run time is multiplied with ember's integer matmul (i32, exact) or, for the
convolutions, in f64 (exact for 8-bit operands). Requantization is onnxruntime's: the i32 sum times
the f32 multiplier a_scale * b_scale / y_scale, rounded half to even, plus the zero point, saturated.

Example:
    >>> OPS[("", "QuantizeLinear")](call, x, scale, zero_point)
"""

from __future__ import annotations

import numpy as np

from ...api import math as M
from ...api import reduce as R
from ...api.index import index_select
from ...api.linalg import matmul
from ...dtype import f32, f64, i32, u8
from ...quant import QuantLinear
from .. import values
from ..proto import ONNX_OF, dtype_of, type_name
from ..qweights import IntegerLinear, nbits_codes
from .nn import conv, gemm_output
from .registry import op


def _broadcast(call, v, x, axis: int):
    """Scale or zero point `v` shaped to broadcast against `x` (scalar, per axis, or blocked)."""
    if v.ndim == 0 or v.numel == 1:
        return v.reshape(())
    axis %= x.ndim
    if v.ndim == 1:
        return v.reshape(-1, *[1] * (x.ndim - axis - 1))
    block = call.attr("block_size", 0)
    if not block:
        call.unsupported(f"a {v.ndim}-D scale without block_size")
    idx = call.const(np.minimum(np.arange(x.shape[axis]) // block, v.shape[axis] - 1).astype(np.int64))
    return index_select(v, axis, idx)


def _saturate(y, dt, code: int | None = None):
    """`y` rounded values clamped to the range of ONNX type `code` (default: of ember dtype `dt`)."""
    info = np.iinfo(dt.np) if code is None else _int_range(code)
    return M.clamp(y, min=float(info.min), max=float(info.max)).cast(dt if code is None else values.holder(code))


def _int_range(code: int):
    import ml_dtypes
    return ml_dtypes.iinfo(values.np_dtype(code))


def _output_code(call, zero_point) -> int:
    code = call.out_type(0) or call.attr("output_dtype", 0)
    if not code:
        code = ONNX_OF.get(zero_point.dtype) if zero_point is not None else 2  # uint8 by default
    return code


@op("QuantizeLinear")
def quantize_linear(call, x, scale, zero_point=None):
    axis = call.attr("axis", 1)
    code = _output_code(call, zero_point)
    dt = values.holder(code)
    if dt is None or dt.name == "bool":
        call.unsupported(f"quantizing to {type_name(code)}")
    wide = x.cast(f32) if x.dtype.itemsize < 4 else x
    y = wide / _broadcast(call, scale, x, axis).cast(wide.dtype)
    if dt.is_float:  # float8 (no zero point) or float4 (zero point added): rounded by the format
        if zero_point is not None and code == 23:
            y = y + _broadcast(call, zero_point, x, axis).cast(wide.dtype)
        return values.encode(y, code, bool(call.attr("saturate", 1)))
    y = M.round(y)
    if zero_point is not None:
        y = y + _broadcast(call, zero_point, x, axis).cast(wide.dtype)
    return _saturate(y, dt, code)


@op("DequantizeLinear")
def dequantize_linear(call, x, scale, zero_point=None):
    axis = call.attr("axis", 1)
    y = x.cast(f32 if x.dtype.is_float else i32)
    if zero_point is not None:
        y = y - _broadcast(call, zero_point, x, axis).cast(y.dtype)
    out = call.attr("output_dtype", 0)
    dt = dtype_of(out) if out else scale.dtype
    return (y.cast(f32) * _broadcast(call, scale, x, axis).cast(f32)).cast(dt)


@op("DynamicQuantizeLinear")
def dynamic_quantize_linear(call, x):
    lo = M.minimum(R.amin(x), x.new_zeros(()))
    hi = M.maximum(R.amax(x), x.new_zeros(()))
    span = hi - lo
    scale = M.where(span == 0, span + 1, span) / 255.0  # an all-zero x: scale 1/255, as ONNX's reference
    zp = _saturate(M.round(-lo / scale), u8)
    y = _saturate(M.round(x / scale) + zp.cast(x.dtype), u8)
    return y, scale.cast(f32), zp


def _shifted(v, zp, dt):
    v = v.cast(dt)
    return v - zp.cast(dt) if zp is not None else v


def _zp_along(zp, axis: int):
    """A per-row (A, axis -2) or per-column (B) zero point of a quantized matmul, shaped to broadcast."""
    if zp is None or zp.ndim == 0 or zp.numel == 1:
        return None if zp is None else zp.reshape(())
    return zp.reshape(-1, 1) if axis == -2 else zp.reshape(-1)


def _integer_product(a, a_zp, b, b_zp):
    """(a - a_zp) @ (b - b_zp) in i32: by the layer a constant b was made into, else ember's matmul."""
    if isinstance(b, IntegerLinear):
        return b(a, a_zp) if a.ndim > 1 else b(a.reshape(1, -1), a_zp).reshape(-1)
    return matmul(_shifted(a, _zp_along(a_zp, -2), i32), _shifted(b, _zp_along(b_zp, -1), i32))


def _scalar(v):
    """A per-tensor (or, for A, per-row) scale as f32 shaped to broadcast against the product."""
    return v.cast(f32).reshape(-1, 1) if v.numel > 1 else v.cast(f32).reshape(())


def _b_scale(b, b_scale):
    """B's scale, per tensor or per column, as f32 (a constant B's layer keeps it)."""
    v = (b.scale if isinstance(b, IntegerLinear) else b_scale).cast(f32)
    return v.reshape(-1) if v.numel > 1 else v.reshape(())


def _requantize(acc, multiplier, y_zp, dt):
    """onnxruntime's requantization: round(f32(acc) * multiplier) + y_zp, saturated to `dt`."""
    y = M.round(acc.cast(f32) * multiplier)
    return _saturate(y + y_zp.cast(f32).reshape(()) if y_zp is not None else y, dt)


@op("MatMulInteger")
def mat_mul_integer(call, a, b, a_zp=None, b_zp=None):
    return _integer_product(a, a_zp, b, b_zp)


@op("QLinearMatMul")
def q_linear_mat_mul(call, a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp):
    acc = _integer_product(a, a_zp, b, b_zp)
    multiplier = _scalar(a_scale) * _b_scale(b, b_scale) / _scalar(y_scale)
    return _requantize(acc, multiplier, y_zp, y_zp.dtype)


@op("QGemm", domain="com.microsoft")
def q_gemm(call, a, a_scale, a_zp, b, b_scale, b_zp=None, c=None, y_scale=None, y_zp=None):
    """onnxruntime's quantized Gemm: (alpha * a_scale * b_scale) * (A'B' + C) with C int32, quantized
    by y_scale and y_zero_point when given, else f32."""
    if call.attr("transA", 0):
        a = a.T
    if not isinstance(b, IntegerLinear) and call.attr("transB", 0):
        b = b.T
    acc = _integer_product(a, a_zp, b, b_zp)
    if c is not None:
        acc = acc + c.cast(i32)
    multiplier = _scalar(a_scale) * _b_scale(b, b_scale) * call.attr("alpha", 1.0)
    if y_scale is None:
        return acc.cast(f32) * multiplier
    return _requantize(acc, multiplier / _scalar(y_scale), y_zp, y_zp.dtype if y_zp is not None else a.dtype)


@op("QLinearAdd", "QLinearMul", domain="com.microsoft")
def q_linear_binary(call, a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp=None):
    """onnxruntime's elementwise A + B or A * B of quantized operands, quantized by c_scale, c_zp."""
    da, db = _shifted(a, a_zp, f32), _shifted(b, b_zp, f32)
    a_s, b_s, c_s = (v.cast(f32).reshape(()) for v in (a_scale, b_scale, c_scale))
    y = (a_s * da + b_s * db) / c_s if call.node.op_type == "QLinearAdd" else da * db * (a_s * b_s / c_s)
    y = M.round(y)
    return _saturate(y + c_zp.cast(f32).reshape(()) if c_zp is not None else y, a.dtype)


def dequantized_mat_mul(call, a, layer: QuantLinear):
    """MatMul(a, DequantizeLinear(W)) with W made a `QuantLinear` at load (`quant_matmul`)."""
    return layer(a) if a.ndim > 1 else layer(a.reshape(1, -1)).reshape(-1)


def dequantized_gemm(call, a, layer: QuantLinear, c=None):
    """Gemm(a, DequantizeLinear(W), c) with W made a `QuantLinear` at load (its transB folded in)."""
    if call.attr("transA", 0):
        a = a.T
    return gemm_output(call, layer(a), c, a.dtype)


@op("MatMulNBits", domain="com.microsoft")
def mat_mul_nbits(call, a, b, scales, zero_points=None, g_idx=None, bias=None):
    """onnxruntime's weight-only matmul: B of `bits`-bit codes in blocks of `block_size` along K,
    (code - zero point) * scale. A constant B arrives as the `QuantLinear` made at load."""
    k, n = call.attr("K"), call.attr("N")
    if call.attr("weight_prepacked", 0):
        call.unsupported("weight_prepacked (a layout of one execution provider): only 0")
    if isinstance(b, QuantLinear):
        y = b(a)
    elif b.numel == 0:  # an omitted projection: zeros (and the bias)
        y = a.new_zeros(*a.shape[:-1], n)
    else:
        y = matmul(a, _nbits_dense(call, b, scales, zero_points, g_idx, k, n).cast(a.dtype))
    return y + bias if bias is not None else y


def _nbits_dense(call, b, scales, zero_points, g_idx, k: int, n: int):
    """MatMulNBits' B (k, n) dequantized in f32, (code - zero point) * scale: for a B computed at run
    time, float zero points, or the (deprecated) group indices `g_idx`."""
    bits, block = call.attr("bits", 4), call.attr("block_size")
    if bits not in (2, 4, 8):
        call.unsupported(f"bits={bits}: ember reads 2, 4 and 8 bit codes")
    zeros = None if zero_points is None else call.host(zero_points)
    codes, s, z = nbits_codes(call.host(b), call.host(scales), zeros, k, n, bits, block)
    group = np.arange(k) // block if g_idx is None else call.host(g_idx).astype(np.int64)
    return call.const(((codes - z[:, group]) * s.astype(np.float32)[:, group]).T.astype(np.float32))


@op("ConvInteger")
def conv_integer(call, x, w, x_zp=None, w_zp=None):
    w_zp = w_zp.reshape(-1, *[1] * (w.ndim - 1)) if w_zp is not None and w_zp.numel > 1 else w_zp
    y = conv(call, _shifted(x, x_zp, f64), _shifted(w, w_zp, f64))
    return y.cast(i32)


@op("QLinearConv")
def q_linear_conv(call, x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias=None):
    nd = w.ndim - 2
    w_zp = w_zp.reshape(-1, *[1] * (nd + 1)) if w_zp.numel > 1 else w_zp
    acc = conv(call, _shifted(x, x_zp, f64), _shifted(w, w_zp, f64))
    if bias is not None:
        acc = acc + bias.cast(f64).reshape(-1, *[1] * nd)
    w_s = w_scale.cast(f64).reshape(-1, *[1] * nd) if w_scale.numel > 1 else w_scale.cast(f64).reshape(())
    y = M.round(acc * x_scale.cast(f64).reshape(()) * w_s / y_scale.cast(f64).reshape(()))
    return _saturate(y + y_zp.cast(f64).reshape(()), y_zp.dtype)
