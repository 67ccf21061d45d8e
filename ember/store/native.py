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

from ..dtype import ALL, DType
from ..errors import StoreError, brief
from ..atomic import atomic_open
from .mapped import map_file
from .state import array_view, check_metadata, check_shape, check_state, little_endian_bytes, parse_json

__all__ = ["save_native", "load_native", "MAGIC", "VERSION", "ALIGNMENT"]

MAGIC = b"EMBR"
VERSION = 1
ALIGNMENT = 64
_PREAMBLE = struct.Struct("<4sIQ")
_MAX_HEADER = 100_000_000  # as safetensors: a header beyond it is damage, not a model
_ENTRY_KEYS = {"dtype", "shape", "offset", "nbytes"}
_DTYPES = {dtype.name: dtype for dtype in ALL}


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

    Only what `save_native` writes loads: version 1; a header of at most 100 MB of strict JSON
    (`state.parse_json`) with exactly the keys "metadata" (str -> str) and "tensors", each tensor with
    exactly "dtype" (an ember dtype name), "shape", "offset" and "nbytes" (numel * itemsize); in
    header order, each tensor starts at the first multiple of 64 after the one before (zero bytes
    between), and the last one ends the file. Anything else raises `StoreError` naming the file and
    the tensor.

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
    if version != VERSION:
        raise StoreError(f"{name}: format version {version} does not exist; expected {VERSION}")
    data_start = _PREAMBLE.size + header_len
    if header_len > _MAX_HEADER:
        raise StoreError(f"{name}: header length {header_len} is over the {_MAX_HEADER // 10**6} MB limit")
    if data_start > len(buffer):
        raise StoreError(f"{name}: header needs bytes {_PREAMBLE.size}..{data_start} but the file has {len(buffer)}")
    if data_start % ALIGNMENT:
        raise StoreError(f"{name}: header length {header_len} does not end on a {ALIGNMENT}-byte boundary")
    tensors, metadata = _parse_header(name, bytes(buffer[_PREAMBLE.size:data_start]))
    layout = {key: _entry(name, key, entry) for key, entry in tensors.items()}
    _check_layout(name, buffer, data_start, layout)
    state = {key: array_view(buffer, dtype, shape, data_start + offset)
             for key, (dtype, shape, offset) in layout.items()}
    return state, metadata


def _parse_header(name: str, raw: bytes) -> tuple[dict, dict[str, str]]:
    header = parse_json(name, raw)
    if not isinstance(header, dict) or set(header) != {"metadata", "tensors"}:
        found = sorted(header) if isinstance(header, dict) else type(header).__name__
        raise StoreError(f"{name}: header must be an object of exactly 'metadata' and 'tensors', found {brief(found)}")
    tensors, metadata = header["tensors"], header["metadata"]
    if not isinstance(tensors, dict):
        raise StoreError(f"{name}: header 'tensors' must be an object, got {brief(tensors)}")
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise StoreError(f"{name}: header 'metadata' must be an object of strings, got {brief(metadata)}")
    return tensors, metadata


def _entry(name: str, key: str, entry) -> tuple[DType, tuple[int, ...], int]:
    """One header entry as (dtype, shape, offset), after checking its fields."""
    where = f"{name}: tensor {brief(key)}"
    if not isinstance(entry, dict) or set(entry) != _ENTRY_KEYS:
        found = sorted(entry) if isinstance(entry, dict) else entry
        raise StoreError(f"{where}: header entry must be an object of exactly {', '.join(sorted(_ENTRY_KEYS))}, "
                         f"found {brief(found)}")
    dtype = _DTYPES.get(entry["dtype"]) if isinstance(entry["dtype"], str) else None
    if dtype is None:
        raise StoreError(f"{where}: unknown dtype {brief(entry['dtype'])}; expected one of {', '.join(_DTYPES)}")
    shape, offset, nbytes = check_shape(where, entry["shape"], dtype.itemsize), entry["offset"], entry["nbytes"]
    if type(offset) is not int or offset < 0 or offset % ALIGNMENT:
        raise StoreError(f"{where}: offset must be a non-negative multiple of {ALIGNMENT}, got {brief(offset)}")
    expected = math.prod(shape) * dtype.itemsize
    if type(nbytes) is not int or nbytes != expected:
        raise StoreError(f"{where}: nbytes is {brief(nbytes)} but {dtype.name} {shape} needs {expected}")
    return dtype, shape, offset


def _check_layout(name: str, buffer: memoryview, data_start: int,
                  layout: dict[str, tuple[DType, tuple[int, ...], int]]) -> None:
    """In header order, each tensor starts where `save_native` puts it: the first multiple of 64 after
    the previous one's end (zero bytes between); the last one ends the file."""
    end = 0
    for key, (dtype, shape, offset) in layout.items():
        if offset != _align(end):
            raise StoreError(f"{name}: tensor {brief(key)} at offset {offset} should start at {_align(end)}, "
                             f"right after the tensor before it: the header has gaps or overlaps")
        if any(buffer[data_start + end:data_start + offset]):
            raise StoreError(f"{name}: the padding before tensor {brief(key)} is not zero bytes")
        begin, end = offset, offset + math.prod(shape) * dtype.itemsize
        if data_start + end > len(buffer):
            raise StoreError(f"{name}: tensor {brief(key)} needs bytes {data_start + begin}..{data_start + end} "
                             f"but the file has {len(buffer)}")
    if data_start + end != len(buffer):
        raise StoreError(f"{name}: the tensors end at byte {data_start + end} but the file goes on to {len(buffer)}")
