"""Reading ONNX protobufs into ember's terms: element types, tensors, attributes, value types.

`DTYPES` maps ONNX element types onto ember dtypes; an element type ember does not hold (uint16/32/64,
float8, int4, string, complex) is refused by name where a value of it would be made, except 4-bit
integer initializers (quantized weights' codes), which are widened to 8 bits (`WIDENED`).

Example:
    >>> to_array(tensor_proto).dtype
    dtype('float32')
"""

from __future__ import annotations

import numpy as np

from .. import dtype as D
from .errors import require_onnx

# TensorProto.DataType values (stable across onnx releases) onto ember dtypes.
DTYPES = {1: D.f32, 2: D.u8, 3: D.i8, 5: D.i16, 6: D.i32, 7: D.i64, 9: D.bool_, 10: D.f16, 11: D.f64,
          16: D.bf16}
ONNX_OF = {d: code for code, d in DTYPES.items()}
WIDENED = {21: D.u8, 22: D.i8}  # UINT4, INT4 initializers: held in 8 bits (the codes of a quantized weight)
NAMES = {0: "UNDEFINED", 1: "FLOAT", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32",
         7: "INT64", 8: "STRING", 9: "BOOL", 10: "FLOAT16", 11: "DOUBLE", 12: "UINT32", 13: "UINT64",
         14: "COMPLEX64", 15: "COMPLEX128", 16: "BFLOAT16", 17: "FLOAT8E4M3FN", 18: "FLOAT8E4M3FNUZ",
         19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ", 21: "UINT4", 22: "INT4", 23: "FLOAT4E2M1"}


def dtype_of(code: int):
    """The ember dtype of ONNX element type `code`, or None where ember holds no such dtype."""
    return DTYPES.get(code)


def type_name(code: int) -> str:
    return NAMES.get(code, f"element type {code}")


def to_array(t, base_dir: str | None = None) -> np.ndarray:
    """A TensorProto as a NumPy array (external data read from `base_dir`); 4-bit integer tensors (the
    codes of a quantized weight) widened to int8 / uint8, which hold their values exactly."""
    onnx = require_onnx()
    if base_dir is not None and onnx.external_data_helper.uses_external_data(t):
        onnx.external_data_helper.load_external_data_for_tensor(t, base_dir)
    array = onnx.numpy_helper.to_array(t)
    return array.astype(WIDENED[t.data_type].np) if t.data_type in WIDENED else array


def attribute(a, parse_graph):
    """The Python value of AttributeProto `a`: numbers, strings (decoded), lists, arrays for tensors,
    `parse_graph(g)` for graphs."""
    onnx = require_onnx()
    A = onnx.AttributeProto
    if a.type == A.TENSOR:
        return to_array(a.t)
    if a.type == A.TENSORS:
        return [to_array(t) for t in a.tensors]
    if a.type == A.GRAPH:
        return parse_graph(a.g)
    if a.type == A.GRAPHS:
        return [parse_graph(g) for g in a.graphs]
    if a.type == A.SPARSE_TENSOR:
        return _sparse_to_array(a.sparse_tensor)
    value = onnx.helper.get_attribute_value(a)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode() for v in value]
    return value


def _sparse_to_array(s) -> np.ndarray:
    values, indices = to_array(s.values), to_array(s.indices)
    dense = np.zeros(int(np.prod(s.dims)), values.dtype)
    flat = indices if indices.ndim == 1 else np.ravel_multi_index(indices.T, tuple(s.dims))
    dense[flat] = values
    return dense.reshape(tuple(s.dims))
