"""ember's native model format: an aligned, memory-mappable file with a JSON header.

Layout (all integers little-endian):

    offset 0   4 bytes   magic b"EMBR"
    offset 4   u32       format version (1)
    offset 8   u64       header length H
    offset 16  H bytes   JSON header, padded with spaces so the data starts on a 64-byte boundary
    offset D   data      D = 16 + H, a multiple of 64; each tensor starts at D + its offset,
                         and every offset is a multiple of 64 (zero bytes fill the gaps)

The header is `{"metadata": {str: str}, "tensors": {name: {"dtype": "f32", "shape": [2, 3],
"offset": 0, "nbytes": 24}}}` with dtype names as in `ember.dtype` and offsets relative to D.
64-byte alignment lets a memory-mapped tensor feed SIMD loads and GPU copies directly.

Example:
    >>> save_native("m.ember", {"w": np.ones((2, 3), np.float32)}, metadata={"epoch": "3"})
    >>> state, metadata = load_native("m.ember")
    >>> state["w"].shape, metadata
    ((2, 3), {'epoch': '3'})
"""

from __future__ import annotations

import json
import math
import os
import struct
from typing import Mapping

import numpy as np

from ..dtype import DType, dtype_of
from ..errors import DTypeError, StoreError
from ..atomic import atomic_open
from .mapped import map_file
from .state import array_view, check_metadata, check_state, little_endian_bytes

__all__ = ["save_native", "load_native", "MAGIC", "VERSION", "ALIGNMENT"]

MAGIC = b"EMBR"
VERSION = 1
ALIGNMENT = 64
_PREAMBLE = struct.Struct("<4sIQ")


def _align(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


def save_native(path: str | os.PathLike, state: Mapping[str, np.ndarray],
                metadata: Mapping[str, str] | None = None) -> None:
    """Write `state` (and optional string metadata) to `path` in ember's native format, atomically.

    Example:
        >>> save_native("m.ember", {"b": np.zeros(4, np.int64)})
    """
    entries = check_state(path, state)
    tensors, offset = {}, 0
    for key, array, dtype in entries:
        nbytes = array.size * dtype.itemsize
        tensors[key] = {"dtype": dtype.name, "shape": list(array.shape), "offset": offset, "nbytes": nbytes}
        offset = _align(offset + nbytes)
    header = json.dumps({"metadata": check_metadata(path, metadata), "tensors": tensors},
                        separators=(",", ":")).encode()
    header += b" " * (_align(_PREAMBLE.size + len(header)) - _PREAMBLE.size - len(header))
    with atomic_open(path) as f:
        f.write(_PREAMBLE.pack(MAGIC, VERSION, len(header)))
        f.write(header)
        written = 0
        for key, array, _ in entries:
            f.write(b"\0" * (tensors[key]["offset"] - written))
            f.write(little_endian_bytes(array))
            written = tensors[key]["offset"] + tensors[key]["nbytes"]


def load_native(path: str | os.PathLike, mmap: bool = True) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Read a native file: `(state, metadata)`.

    With `mmap=True` every array is a read-only view of the memory-mapped file (no copy; pages load
    when touched); with `mmap=False` the file is read into memory once and the arrays are writable
    views of that buffer.

    Example:
        >>> state, metadata = load_native("m.ember")
        >>> state["b"].flags.owndata
        False
    """
    name = os.fspath(path)
    buffer = map_file(path, mmap)
    if len(buffer) < _PREAMBLE.size:
        raise StoreError(f"{name}: truncated: {len(buffer)} bytes, shorter than the {_PREAMBLE.size}-byte preamble")
    magic, version, header_len = _PREAMBLE.unpack_from(buffer)
    if magic != MAGIC:
        raise StoreError(f"{name}: expected magic {MAGIC!r}, found {magic!r}; not an ember native file")
    if version > VERSION:
        raise StoreError(f"{name}: format version {version} is newer than this ember reads ({VERSION}); upgrade ember")
    data_start = _PREAMBLE.size + header_len
    if data_start > len(buffer):
        raise StoreError(f"{name}: header needs bytes {_PREAMBLE.size}..{data_start} but the file has {len(buffer)}")
    tensors, metadata = _parse_header(name, bytes(buffer[_PREAMBLE.size:data_start]))
    state = {key: _tensor(name, buffer, data_start, key, entry) for key, entry in tensors.items()}
    return state, metadata


def _parse_header(name: str, raw: bytes) -> tuple[dict, dict[str, str]]:
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StoreError(f"{name}: header is not valid JSON ({e})") from e
    if not isinstance(header, dict) or not isinstance(header.get("tensors"), dict):
        raise StoreError(f"{name}: header must be an object with a 'tensors' object")
    metadata = header.get("metadata", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise StoreError(f"{name}: header 'metadata' must be an object of strings")
    return header["tensors"], metadata


def _tensor(name: str, buffer: memoryview, data_start: int, key: str, entry) -> np.ndarray:
    if not isinstance(entry, dict):
        raise StoreError(f"{name}: tensor {key!r}: header entry must be an object, got {entry!r}")
    try:
        dtype: DType = dtype_of(entry.get("dtype"))
    except DTypeError as e:
        raise StoreError(f"{name}: tensor {key!r}: unknown dtype {entry.get('dtype')!r}") from e
    shape, offset, nbytes = entry.get("shape"), entry.get("offset"), entry.get("nbytes")
    if not isinstance(shape, list) or len(shape) > 64 or not all(type(d) is int and d >= 0 for d in shape):
        raise StoreError(f"{name}: tensor {key!r}: shape must be a list of at most 64 non-negative ints, got {shape!r}")
    if type(offset) is not int or offset < 0 or offset % ALIGNMENT:
        raise StoreError(f"{name}: tensor {key!r}: offset must be a non-negative multiple of {ALIGNMENT}, got {offset!r}")
    expected = math.prod(shape) * dtype.itemsize
    if nbytes != expected:
        raise StoreError(f"{name}: tensor {key!r}: nbytes is {nbytes!r} but {dtype.name} {tuple(shape)} needs {expected}")
    begin, end = data_start + offset, data_start + offset + nbytes
    if end > len(buffer):
        raise StoreError(f"{name}: tensor {key!r} needs bytes {begin}..{end} but the file has {len(buffer)}")
    return array_view(buffer, dtype, tuple(shape), begin)
