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

from ..dtype import DType, bf16, bool_, c64, f16, f32, f64, i8, i16, i32, i64, u8
from ..errors import StoreError, brief
from ..atomic import atomic_open
from .mapped import map_file
from .state import array_view, check_metadata, check_shape, check_state, little_endian_bytes, parse_json

__all__ = ["save_safetensors", "load_safetensors", "DTYPE_NAMES"]

DTYPE_NAMES: dict[DType, str] = {
    f64: "F64", f32: "F32", f16: "F16", bf16: "BF16", i64: "I64", i32: "I32", i16: "I16", i8: "I8",
    u8: "U8", bool_: "BOOL", c64: "C64",
}  # complex128: the format has no such dtype (save_safetensors refuses it by name)
_BY_NAME = {v: k for k, v in DTYPE_NAMES.items()}
# the reference's other dtypes: only for a clearer refusal
_OTHER_DTYPES = ("U16", "U32", "U64", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2")
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
        if dtype not in DTYPE_NAMES:
            raise StoreError(f"{os.fspath(path)}: state[{key!r}] is {dtype.name}, which safetensors files cannot "
                             f"hold (they hold {', '.join(d.name for d in DTYPE_NAMES)}); save it as .ember or .pt")
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

    Validated as the reference `safetensors` package does: a header of at most 100 MB of strict
    JSON (`state.parse_json`), an object whose `__metadata__` (if not null) maps str to str and whose
    other entries each have a known `dtype`, a `shape` of non-negative ints and `data_offsets`
    `[begin, end]` spanning exactly numel * itemsize bytes; sorted by offset, the tensors tile the
    data buffer from 0 to its end with no gap or overlap. Beyond the reference, duplicate names are
    refused. Anything else raises `StoreError` naming the file and the tensor.

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
    header = parse_json(name, bytes(buffer[_LENGTH.size:data_start]))
    if not isinstance(header, dict):
        raise StoreError(f"{name}: header must be a JSON object, got {type(header).__name__}")
    metadata = header.pop("__metadata__", None)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise StoreError(f"{name}: '__metadata__' must be an object of strings, got {brief(metadata)}")
    layout = {key: _entry(name, key, entry) for key, entry in header.items()}
    _check_tiling(name, layout, data_start, len(buffer))
    state = {key: array_view(buffer, dtype, shape, data_start + begin)
             for key, (dtype, shape, begin, _) in layout.items()}
    return state, metadata


def _entry(name: str, key: str, entry) -> tuple[DType, tuple[int, ...], int, int]:
    """One header entry as (dtype, shape, begin, end), after checking its fields' types and sizes."""
    where = f"{name}: tensor {brief(key)}"
    if not isinstance(entry, dict):
        raise StoreError(f"{where}: header entry must be an object, got {brief(entry)}")
    missing = [field for field in ("dtype", "shape", "data_offsets") if field not in entry]
    if missing:
        raise StoreError(f"{where}: header entry lacks {', '.join(missing)}")
    dtype = _BY_NAME.get(entry["dtype"]) if isinstance(entry["dtype"], str) else None
    if dtype is None:
        kind = "is not one ember holds" if entry["dtype"] in _OTHER_DTYPES else "is not a safetensors dtype"
        raise StoreError(f"{where}: dtype {brief(entry['dtype'])} {kind}; ember holds {', '.join(_BY_NAME)}")
    shape, offsets = check_shape(where, entry["shape"], dtype.itemsize), entry["data_offsets"]
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(type(o) is int and 0 <= o < 1 << 64 for o in offsets) or offsets[0] > offsets[1]):
        raise StoreError(f"{where}: data_offsets must be [begin, end] with 0 <= begin <= end, got {brief(offsets)}")
    begin, end = offsets
    expected = math.prod(shape) * dtype.itemsize
    if end - begin != expected:
        raise StoreError(f"{where}: data_offsets span {end - begin} bytes but {dtype.name} {shape} needs {expected}")
    return dtype, shape, begin, end


def _check_tiling(name: str, layout: dict[str, tuple[DType, tuple[int, ...], int, int]], data_start: int,
                  file_len: int) -> None:
    """Sorted by offset, the tensors must cover the data buffer (data_start..file_len) exactly once."""
    reached = 0
    for key, (_, _, begin, end) in sorted(layout.items(), key=lambda item: item[1][2:]):
        if begin != reached:
            what = "overlaps the tensor before it" if begin < reached else f"leaves bytes {reached}..{begin} unused"
            raise StoreError(f"{name}: tensor {brief(key)} at data_offsets [{begin}, {end}] {what}")
        if data_start + end > file_len:
            raise StoreError(f"{name}: tensor {brief(key)} needs bytes {data_start + begin}..{data_start + end} "
                             f"but the file has {file_len}")
        reached = end
    if data_start + reached != file_len:
        raise StoreError(f"{name}: the tensors end at byte {data_start + reached} but the file goes on to {file_len}")
