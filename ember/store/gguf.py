"""GGUF files (llama.cpp's format), read through the `gguf` package (`pip install 'ember[gguf]'`).

`read_gguf` gives `(state, metadata)`: host arrays in PyTorch's layout (GGUF lists dims innermost
first; a (out, in) Linear weight comes back (out, in)) and the typed key-value metadata
(`general.architecture`, hyperparameters, tokenizer). Tensor types F32, F16, BF16, F64 and I8..I64
keep their dtype; Q8_0, Q4_0, Q4_K and Q6_K are dequantized to f32 by `ggml_blocks`, bit for bit as
`gguf.quants.dequantize`. With `raw=True`, Q8_0 and Q4_0 tensors come as `QuantParts` in the
quantized-tensor layout instead; Q4_K and Q6_K are still dequantized (their two-level scales have no
such layout). `load_gguf` gives ember tensors. Names stay llama.cpp's (`blk.0.attn_q.weight`); rename
them with `ember.store.remap`. A file that is not GGUF, damaged or truncated, or holds another tensor
type raises `StoreError` naming the file, the tensor and the problem.

Example:
    >>> state, metadata = read_gguf("model.gguf")
    >>> metadata["general.architecture"], state["token_embd.weight"].dtype
    ('llama', dtype('float32'))
    >>> load_gguf("model.gguf", device="cpu", dtype="bf16")["output_norm.weight"].dtype
    bf16
"""

from __future__ import annotations

import functools
import math
import os
from typing import Any, NamedTuple

import numpy as np

from .. import qscheme
from ..api.creation import from_numpy
from ..api.quantize import QTensor
from ..dtype import DType, dtype_of
from ..errors import StoreError, brief
from ..tensor import Tensor
from . import ggml_blocks, remap

__all__ = ["read_gguf", "load_gguf", "QuantParts", "SUPPORTED", "MAGIC", "INSTALL"]

MAGIC = b"GGUF"
INSTALL = "pip install 'ember[gguf]'"
# ggml type -> ember dtype, for the types stored as plain elements
_PLAIN = {"F32": "f32", "F16": "f16", "BF16": "bf16", "F64": "f64", "I8": "i8", "I16": "i16", "I32": "i32",
          "I64": "i64"}
SUPPORTED = (*_PLAIN, *ggml_blocks.BLOCKS)
_RAW = {"Q8_0": "int8", "Q4_0": "int4"}  # ggml type -> the quantized-tensor code its parts hold
# what a damaged header makes gguf's reader raise: short reads, bad enum values, undecodable names
_READ_ERRORS = (ValueError, IndexError, KeyError, OverflowError, UnicodeDecodeError)


class QuantParts(NamedTuple):
    """A Q8_0 or Q4_0 tensor as the parts of a quantized tensor: `scales[..., k // block] * code(k)`."""
    values: np.ndarray          # uint8: int8 codes (..., K) or int4 nibble pairs (..., K / 2)
    scales: np.ndarray          # f16 (..., K / block)
    zeros: None                 # symmetric: no zero point
    code: str                   # "int8" or "int4"
    block: int                  # 32
    shape: tuple[int, ...]      # the logical shape (..., K)


@functools.cache
def _reader_class() -> type:
    """gguf's reader, made to check each read against the file's end, and each tensor's type, row size
    and extent before it maps it."""
    try:
        import gguf
    except ImportError:
        raise ImportError(f"reading GGUF files needs the gguf package: {INSTALL}") from None

    class Reader(gguf.GGUFReader):
        def __init__(self, path: str | os.PathLike) -> None:
            self.path = os.fspath(path)  # for the messages of the checks the constructor runs
            super().__init__(path)

        def _get(self, offset: int, dtype: Any, count: int = 1, override_order: Any = None) -> np.ndarray:
            end = offset + np.dtype(dtype).itemsize * int(count)
            if end > len(self.data):  # gguf would read short and fail later in NumPy
                raise StoreError(f"{self.path}: truncated GGUF header: it needs bytes {offset}..{end} but "
                                 f"the file has {len(self.data)}")
            return super()._get(offset, dtype, count, override_order)

        def _build_tensors(self, start_offs: int, fields: list) -> None:
            for field in fields:
                _check_tensor(self, gguf, start_offs, field)
            super()._build_tensors(start_offs, fields)

    return Reader


def _check_tensor(reader: Any, gguf: Any, start: int, field: Any) -> None:
    """Refuse, naming it, a tensor of an unknown or unsupported type, ragged rows or bytes past the end."""
    name, dims, raw_type, offset = field.name, field.parts[3].tolist(), int(field.parts[4][0]), int(field.parts[5][0])
    where = f"{reader.path}: tensor {brief(name)}"
    try:
        kind = gguf.GGMLQuantizationType(raw_type).name
    except ValueError:
        raise StoreError(f"{where}: tensor type {raw_type} is not a GGML type; ember reads "
                         f"{', '.join(SUPPORTED)}") from None
    if kind not in SUPPORTED:
        raise StoreError(f"{where}: tensor type {kind} is not supported; ember reads {', '.join(SUPPORTED)}")
    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(raw_type)]
    shape = tuple(reversed(dims))
    if dims and dims[0] % block:
        raise StoreError(f"{where}: {kind} {shape}: rows of {dims[0]} elements are not a multiple of "
                         f"its block of {block}")
    begin = start + offset
    end = begin + math.prod(dims) // block * size
    if end > len(reader.data):
        raise StoreError(f"{reader.path}: truncated: tensor {brief(name)} ({kind} {shape}) needs bytes "
                         f"{begin}..{end} but the file has {len(reader.data)}")


def _open(path: str | os.PathLike) -> Any:
    """gguf's reader over `path`, after checking the magic; any damage becomes a `StoreError`."""
    name = os.fspath(path)
    with open(path, "rb") as f:
        head = f.read(4)
    if head != MAGIC:
        raise StoreError(f"{name}: not a GGUF file: it starts with {brief(head)}, not {MAGIC!r}")
    reader_class = _reader_class()
    try:
        reader = reader_class(path)
    except StoreError:
        raise
    except _READ_ERRORS as e:
        raise StoreError(f"{name}: damaged GGUF header: {e}") from None
    if reader.byte_order != "I":
        raise StoreError(f"{name}: a big-endian GGUF file; ember reads little-endian ones")
    return reader


def _metadata(reader: Any) -> dict[str, Any]:
    """The file's key-value pairs as Python values (str, int, float, bool, lists of them)."""
    try:
        return {key: field.contents() for key, field in reader.fields.items() if not key.startswith("GGUF.")}
    except _READ_ERRORS as e:
        raise StoreError(f"{reader.path}: damaged GGUF metadata: {e}") from None


def _array(tensor: Any, raw: bool) -> np.ndarray | QuantParts:
    """One tensor in PyTorch's layout: its dtype's array, f32 values, or (raw) its quantized parts."""
    kind, data = tensor.tensor_type.name, tensor.data
    if kind in _PLAIN:
        return np.asarray(data).view(dtype_of(_PLAIN[kind]).np)  # a plain view of the map (BF16 comes as bytes)
    if raw and kind in _RAW:
        values, scales = ggml_blocks.parts(data, kind)
        shape = tuple(reversed(tensor.shape.tolist()))
        return QuantParts(values, scales, None, _RAW[kind], ggml_blocks.BLOCKS[kind][0], shape)
    return ggml_blocks.dequantize(data, kind)


def read_gguf(path: str | os.PathLike, *, raw: bool = False, mmap: bool = True
              ) -> tuple[dict[str, np.ndarray | QuantParts], dict[str, Any]]:
    """`(state, metadata)` of a GGUF file, tensors in the file's order.

    F32, F16, BF16, F64 and integer tensors are read-only views of the memory-mapped file (copies
    with `mmap=False`); quantized ones are new f32 arrays, or `QuantParts` for Q8_0 and Q4_0 when
    `raw`. `metadata` maps each key to its value (str, int, float, bool or a list of them).

    Example:
        >>> state, _ = read_gguf("model.gguf", raw=True)
        >>> state["blk.0.ffn_up.weight"].code
        'int4'
    """
    reader = _open(path)
    metadata = _metadata(reader)
    state = {}
    for tensor in reader.tensors:
        array = _array(tensor, raw)
        state[tensor.name] = array if mmap or not isinstance(array, np.ndarray) else np.array(array)
    return state, metadata


def load_gguf(path: str | os.PathLike, device: Any = None, dtype: str | DType | None = None,
              quantized: bool = False) -> dict[str, Tensor | QTensor]:
    """The tensors of a GGUF file on `device`, dequantized; float ones cast to `dtype` if given.

    Without `dtype`, quantized tensors are f32 (ggml's own result) and the others keep their type.
    With `quantized=True`, Q8_0 and Q4_0 tensors stay quantized, as `QTensor`s of `int8(block=32)` and
    `int4(block=32)` with f16 scales, whose `dequantize()` gives ggml's values exactly; Q4_K and Q6_K
    are still dequantized.

    Example:
        >>> load_gguf("model.gguf", dtype="f16")["blk.0.attn_q.weight"].shape
        (64, 64)
        >>> load_gguf("model.gguf", quantized=True)["blk.0.ffn_up.weight"].dtype
        qint4(block=32, f16 scales)
    """
    state, _ = read_gguf(path, raw=quantized)
    plain = {key: value for key, value in state.items() if not isinstance(value, QuantParts)}
    if dtype is not None:
        plain = remap.cast(plain, dtype)
    out: dict[str, Tensor | QTensor] = {}
    for key, value in state.items():  # the file's order
        if isinstance(value, QuantParts):
            scheme = (qscheme.int8 if value.code == "int8" else qscheme.int4)(block=value.block, scale_dtype="f16")
            out[key] = QTensor(scheme, value.shape, {"values": from_numpy(np.array(value.values), device),
                                                     "scales": from_numpy(np.array(value.scales), device)})
        else:  # views of the read-only map are copied: the NumPy and CPU devices would share their memory
            array = plain[key]
            out[key] = from_numpy(array if array.flags.writeable else np.array(array), device)
    return out
