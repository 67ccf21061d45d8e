"""The safetensors format (Hugging Face), read and written without the `safetensors` package.

Layout: a u64 little-endian header length N, N bytes of JSON, then the data buffer. The JSON maps
each tensor name to `{"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}` (offsets into
the data buffer) and may hold `"__metadata__": {str: str}`. Like the reference writer, tensors are
laid out largest element size first and the header is space-padded to 8 bytes, so every tensor is
aligned to its element size.

Example:
    >>> save_safetensors("m.safetensors", {"w": np.ones((2, 3), np.float32)})
    >>> state, metadata = load_safetensors("m.safetensors")
    >>> state["w"].dtype
    dtype('float32')
"""

from __future__ import annotations

import json
import math
import os
import struct
from typing import Mapping

import numpy as np

from ..dtype import DType, bf16, bool_, f16, f32, f64, i8, i16, i32, i64, u8
from ..errors import StoreError
from ..atomic import atomic_open
from .mapped import map_file
from .state import array_view, check_metadata, check_state, little_endian_bytes

__all__ = ["save_safetensors", "load_safetensors", "DTYPE_NAMES"]

DTYPE_NAMES: dict[DType, str] = {
    f64: "F64", f32: "F32", f16: "F16", bf16: "BF16", i64: "I64", i32: "I32", i16: "I16", i8: "I8",
    u8: "U8", bool_: "BOOL",
}
_BY_NAME = {v: k for k, v in DTYPE_NAMES.items()}
_LENGTH = struct.Struct("<Q")
# The reference implementation refuses headers over 100 MB; so do we, before reading a huge length.
_MAX_HEADER = 100_000_000


def save_safetensors(path: str | os.PathLike, state: Mapping[str, np.ndarray],
                     metadata: Mapping[str, str] | None = None) -> None:
    """Write `state` to `path` as safetensors, atomically; `metadata` becomes `__metadata__`.

    Example:
        >>> save_safetensors("m.safetensors", {"b": np.zeros(4, np.int64)}, {"format": "np"})
    """
    entries = sorted(check_state(path, state), key=lambda e: -e[2].itemsize)
    if "__metadata__" in state:
        raise StoreError(f"{os.fspath(path)}: '__metadata__' is reserved by safetensors and cannot name a tensor")
    header: dict = {}
    if metadata:
        header["__metadata__"] = check_metadata(path, metadata)
    offset = 0
    for key, array, dtype in entries:
        end = offset + array.size * dtype.itemsize
        header[key] = {"dtype": DTYPE_NAMES[dtype], "shape": list(array.shape), "data_offsets": [offset, end]}
        offset = end
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with atomic_open(path) as f:
        f.write(_LENGTH.pack(len(raw)))
        f.write(raw)
        for _, array, _ in entries:
            f.write(little_endian_bytes(array))


def load_safetensors(path: str | os.PathLike, mmap: bool = True) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Read a safetensors file: `(state, metadata)`, tensors in header order.

    With `mmap=True` the arrays are read-only views of the memory-mapped file; otherwise writable
    views of one in-memory copy.

    Example:
        >>> state, metadata = load_safetensors("m.safetensors")
        >>> metadata
        {'format': 'np'}
    """
    name = os.fspath(path)
    buffer = map_file(path, mmap)
    if len(buffer) < _LENGTH.size:
        raise StoreError(f"{name}: truncated: {len(buffer)} bytes, shorter than the 8-byte header length")
    (header_len,) = _LENGTH.unpack_from(buffer)
    data_start = _LENGTH.size + header_len
    if header_len > _MAX_HEADER:
        raise StoreError(f"{name}: header length {header_len} is over the 100 MB limit; not a safetensors file?")
    if data_start > len(buffer):
        raise StoreError(f"{name}: header needs bytes 8..{data_start} but the file has {len(buffer)}")
    try:
        header = json.loads(bytes(buffer[_LENGTH.size:data_start]))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StoreError(f"{name}: header is not valid JSON ({e})") from e
    if not isinstance(header, dict):
        raise StoreError(f"{name}: header must be a JSON object, got {type(header).__name__}")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise StoreError(f"{name}: '__metadata__' must be an object of strings")
    data_len = len(buffer) - data_start
    state = {key: _tensor(name, buffer, data_start, data_len, key, entry) for key, entry in header.items()}
    return state, metadata


def _tensor(name: str, buffer: memoryview, data_start: int, data_len: int, key: str, entry) -> np.ndarray:
    if not isinstance(entry, dict):
        raise StoreError(f"{name}: tensor {key!r}: header entry must be an object, got {entry!r}")
    dtype = _BY_NAME.get(entry.get("dtype"))
    if dtype is None:
        raise StoreError(f"{name}: tensor {key!r}: dtype {entry.get('dtype')!r} is not one ember holds "
                         f"({', '.join(_BY_NAME)})")
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    if not isinstance(shape, list) or len(shape) > 64 or not all(type(d) is int and d >= 0 for d in shape):
        raise StoreError(f"{name}: tensor {key!r}: shape must be a list of at most 64 non-negative ints, got {shape!r}")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]):
        raise StoreError(f"{name}: tensor {key!r}: data_offsets must be [begin, end] with 0 <= begin <= end, "
                         f"got {offsets!r}")
    begin, end = offsets
    expected = math.prod(shape) * dtype.itemsize
    if end - begin != expected:
        raise StoreError(f"{name}: tensor {key!r}: data_offsets span {end - begin} bytes but "
                         f"{dtype.name} {tuple(shape)} needs {expected}")
    if end > data_len:
        raise StoreError(f"{name}: tensor {key!r} needs bytes {data_start + begin}..{data_start + end} "
                         f"but the file has {len(buffer)}")
    return array_view(buffer, dtype, tuple(shape), data_start + begin)
