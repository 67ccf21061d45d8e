"""The values of an imported graph: ONNX element types ember holds are ember tensors; the others are
emulated in a holder dtype, and strings stay host NumPy object arrays.

- uint16 is held in i32 and uint32 in i64, masked back into range after every node that makes one
  (`narrow`), so arithmetic wraps as ONNX says; uint64 is held in i64 by its bit pattern (add, sub, mul,
  the bitwise ops wrap exactly; comparisons, Div, Mod, Max/Min, TopK are exact below 2**63).
- float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e8m0), float4e2m1 are held decoded in f32, int4/int2 in
  i8, uint4/uint2 in u8; the ops that make such values (Cast, QuantizeLinear) round to the format on
  the host with ONNX's own rules (`encode`).
- A graph's outputs of such types come back as NumPy arrays of their type (ml_dtypes for the narrow
  ones, `to_output`).

Example:
    >>> to_value(np.array([1, 2], np.uint32), Device.cpu()).dtype
    i64
"""

from __future__ import annotations

import numpy as np

from .. import dtype as D
from ..tensor import Tensor
from .errors import require_onnx
from .proto import DTYPES, type_name

STRING = 8
HOLDERS = {4: D.i32, 12: D.i64, 13: D.i64, 17: D.f32, 18: D.f32, 19: D.f32, 20: D.f32, 21: D.u8,
           22: D.i8, 23: D.f32, 24: D.f32, 25: D.u8, 26: D.i8}
MASKS = {4: 0xFFFF, 12: 0xFFFFFFFF}
_FLOAT8 = {17, 18, 19, 20}


def holder(code: int | None):
    """The ember dtype a value of ONNX element type `code` is computed in, or None (strings, complex)."""
    return DTYPES.get(code) or HOLDERS.get(code)


def np_dtype(code: int):
    return require_onnx().helper.tensor_dtype_to_np_dtype(code)


def code_of(dt) -> int | None:
    try:
        return require_onnx().helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    except (KeyError, TypeError, ValueError):
        return None


def is_host(value) -> bool:
    """Whether `value` is a host string array (not an ember tensor)."""
    return isinstance(value, np.ndarray)


def to_value(array, device):
    """A host array as a graph value: a tensor of its holder dtype, or an object array of strings.

    Raises:
        ValueError: an element type with no holder (complex); the caller names the node.
    """
    from ..api.creation import tensor
    a = np.asarray(array)
    if a.dtype.kind in "OUS":
        return a.astype(object)
    code = code_of(a.dtype)
    d = holder(code)
    if d is None:
        raise ValueError(f"element type {type_name(code) if code else a.dtype}, which ember neither holds "
                         "nor emulates")
    return tensor(a if code in DTYPES else a.astype(d.np), device=device)


def narrow(value, code: int):
    """`value`, made by a node whose output is of ONNX type `code`, in its holder and range."""
    if not isinstance(value, Tensor):
        return value
    d = holder(code)
    if d is not None and value.dtype != d:
        value = value.cast(d)
    mask = MASKS.get(code)
    return value & mask if mask is not None else value


def encode(x: Tensor, code: int, saturate: bool = True, round_mode: str = "up") -> Tensor:
    """Holder values `x` rounded to ONNX type `code` (float8, float4, int4/int2) on the host, as ONNX's
    reference does, and held again on x's device."""
    from ..api.creation import tensor
    onnx = require_onnx()
    a, dt = x.numpy().astype(np.float32) if x.dtype.is_float else x.numpy(), np_dtype(code)
    with np.errstate(invalid="ignore"):  # NaN to a narrow int is what the cast makes of it
        y = _encoded(onnx, a, dt, code, saturate, round_mode)
    return tensor(y.astype(holder(code).np), device=x.device)


def _encoded(onnx, a: np.ndarray, dt, code: int, saturate: bool, round_mode: str) -> np.ndarray:
    if code in _FLOAT8 and saturate:
        return onnx.numpy_helper.saturate_cast(a, dt)
    if code == 24:
        return onnx.numpy_helper.to_float8e8m0(a, saturate, round_mode).astype(dt)
    return a.astype(dt)


def to_output(value, code: int | None):
    """A graph output as the user gets it: emulated types as NumPy arrays of their ONNX type."""
    if isinstance(value, list):
        return [to_output(v, code) for v in value]
    if code in HOLDERS and isinstance(value, Tensor):
        return value.numpy().astype(np_dtype(code))
    return value
