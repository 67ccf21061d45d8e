"""Checks and conversions shared by the file formats: what a valid state and metadata are.

A *state* is `dict[str, numpy.ndarray]` (bf16 through `ml_dtypes.bfloat16`); *metadata* is
`dict[str, str]`. Files store every element little-endian, whatever the host.

Example:
    >>> entries = check_state("m.ember", {"w": np.zeros((2, 3), np.float32)})
    >>> entries[0][2]
    f32
"""

from __future__ import annotations

import math
import os
from typing import Mapping

import numpy as np

from ..dtype import DType, dtype_of
from ..errors import DTypeError, StoreError

__all__ = ["check_state", "check_metadata", "little_endian_bytes", "array_view"]


def check_state(path: str | os.PathLike, state: Mapping[str, np.ndarray]) -> list[tuple[str, np.ndarray, DType]]:
    """Validate a state before writing it to `path`: string keys, NumPy arrays of ember dtypes.

    Returns `(key, array, dtype)` triples in the state's order.

    Example:
        >>> check_state("m.ember", {"b": np.ones(3, np.int64)})[0][2]
        i64
    """
    if not isinstance(state, Mapping):
        raise StoreError(f"{os.fspath(path)}: expected a dict of str -> numpy.ndarray, got {type(state).__name__}")
    entries = []
    for key, array in state.items():
        if not isinstance(key, str):
            raise StoreError(f"{os.fspath(path)}: state keys must be str, got {key!r}")
        if not isinstance(array, np.ndarray):
            raise StoreError(f"{os.fspath(path)}: state[{key!r}] is a {type(array).__name__}, expected a numpy.ndarray")
        try:
            dtype = dtype_of(array.dtype.newbyteorder("="))
        except DTypeError as e:
            raise StoreError(f"{os.fspath(path)}: state[{key!r}] has dtype {array.dtype}, which ember does not hold") from e
        entries.append((key, array, dtype))
    return entries


def check_metadata(path: str | os.PathLike, metadata: Mapping[str, str] | None) -> dict[str, str]:
    """Validate metadata before writing it: a dict of str -> str (None means empty).

    Example:
        >>> check_metadata("m.ember", {"epoch": "3"})
        {'epoch': '3'}
    """
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise StoreError(f"{os.fspath(path)}: metadata must be a dict of str -> str, got {metadata!r}")
    return dict(metadata)


def little_endian_bytes(array: np.ndarray) -> memoryview:
    """The array's elements as contiguous little-endian bytes (a view when the array already is one).

    Example:
        >>> bytes(little_endian_bytes(np.array([1], np.int16)))
        b'\\x01\\x00'
    """
    if array.dtype.byteorder == ">" or (array.dtype.byteorder == "=" and np.little_endian is False):
        array = array.astype(array.dtype.newbyteorder("<"))
    flat = np.ascontiguousarray(array).reshape(-1)
    return memoryview(flat.view(np.uint8))


def array_view(buffer, dtype: DType, shape: tuple[int, ...], offset: int) -> np.ndarray:
    """An array over little-endian `buffer[offset:]` without copying; read-only if the buffer is.

    Example:
        >>> array_view(b"\\x01\\x00\\x02\\x00", i16, (2,), 0)
        array([1, 2], dtype=int16)
    """
    count = math.prod(shape)
    array = np.frombuffer(buffer, dtype=dtype.np.newbyteorder("<"), count=count, offset=offset)
    return array.reshape(shape)
