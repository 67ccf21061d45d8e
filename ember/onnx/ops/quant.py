"""Quantized ONNX ops, computed with ember's integer and float ops (exact results, not yet the
quantized kernels of `ember.quant`): Quantize/DequantizeLinear (per tensor, per axis, blocked),
DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.

Integer products are accumulated in i32 (MatMulInteger) or in f64, exact for 8-bit operands
(ConvInteger, QLinearConv); rounding is half to even and results saturate to the output type.

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
from .. import values
from ..proto import ONNX_OF, dtype_of, type_name
from .nn import conv
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
    scale = (hi - lo) / 255.0
    zp = _saturate(M.round(-lo / scale), u8)
    y = _saturate(M.round(x / scale) + zp.cast(x.dtype), u8)
    return y, scale.cast(f32), zp


def _shifted(v, zp, dt):
    v = v.cast(dt)
    return v - zp.cast(dt) if zp is not None else v


def _zp_along(zp, ndim: int, axis: int):
    """A per-row (A) or per-column (B) zero point of MatMulInteger as a broadcastable shape."""
    if zp is None or zp.ndim == 0 or zp.numel == 1:
        return None if zp is None else zp.reshape(())
    return zp.reshape(-1, 1) if axis == -2 else zp


@op("MatMulInteger")
def mat_mul_integer(call, a, b, a_zp=None, b_zp=None):
    a = _shifted(a, _zp_along(a_zp, a.ndim, -2), i32)
    b = _shifted(b, _zp_along(b_zp, b.ndim, -1), i32)
    return matmul(a, b)


@op("ConvInteger")
def conv_integer(call, x, w, x_zp=None, w_zp=None):
    w_zp = w_zp.reshape(-1, *[1] * (w.ndim - 1)) if w_zp is not None and w_zp.numel > 1 else w_zp
    y = conv(call, _shifted(x, x_zp, f64), _shifted(w, w_zp, f64))
    return y.cast(i32)


@op("QLinearMatMul")
def q_linear_mat_mul(call, a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp):
    acc = matmul(_shifted(a, _zp_along(a_zp, a.ndim, -2), f64), _shifted(b, _zp_along(b_zp, b.ndim, -1), f64))
    a_s = a_scale.cast(f64).reshape(-1, 1) if a_scale.numel > 1 else a_scale.cast(f64).reshape(())
    b_s = b_scale.cast(f64).reshape(())if b_scale.numel == 1 else b_scale.cast(f64)
    y = M.round(acc * a_s * b_s / y_scale.cast(f64).reshape(())) + y_zp.cast(f64).reshape(())
    return _saturate(y, y_zp.dtype)


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
