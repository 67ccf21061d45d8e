"""Checks and conversions shared by the file formats: what a valid state and metadata are.

A *state* is `dict[str, numpy.ndarray]` (bf16 through `ml_dtypes.bfloat16`); *metadata* is
`dict[str, str]`. Files store every element little-endian, whatever the host.

Example:
    >>> entries = check_state("m.ember", {"w": np.zeros((2, 3), np.float32)})
    >>> entries[0][2]
    f32
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Mapping

import numpy as np

from ..dtype import DType, dtype_of
from ..errors import DTypeError, StoreError, brief

__all__ = ["check_state", "check_metadata", "little_endian_bytes", "array_view", "parse_json", "check_shape",
           "MAX_DIMS"]

MAX_DIMS = 64  # NumPy's limit on the number of dimensions


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


def parse_json(name: str, raw: bytes, what: str = "header") -> Any:
    """`raw` parsed as strict JSON, as the reference (Rust serde_json) readers parse headers.

    UTF-8 only; no NaN, Infinity or overflowing numbers; no duplicate object keys (Python would keep
    the last); no lone surrogate escapes; no integer beyond the float range (serde_json reads those
    past 64 bits as floats), so none of thousands of digits. Any failure, nesting too deep included,
    raises `StoreError` naming `name` and `what`.

    Example:
        >>> parse_json("m.safetensors", b'{"a": [1, 2]}')
        {'a': [1, 2]}
    """
    try:
        return json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys, parse_constant=_no_constant,
                          parse_int=_integer, parse_float=_finite_float)
    except RecursionError:
        raise StoreError(f"{name}: {what} nests too deeply") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError and the refusals below
        raise StoreError(f"{name}: {what} is not valid JSON ({str(e)[:200]})") from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        for text in (key, value) if isinstance(value, str) else (key,):
            text.encode("utf-8")  # a lone surrogate escape ("\\ud800") raises UnicodeEncodeError, a ValueError
        if key in found:
            raise ValueError(f"duplicate key {brief(key)}")
        found[key] = value
    return found


def _no_constant(text: str) -> None:
    raise ValueError(f"{text} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{brief(text)} is out of range")
    return value


def _integer(text: str) -> int:
    # serde_json reads an integer past 64 bits as a float, and refuses it past the float range (~309
    # digits); so does this, before Python's int() could spend time on thousands of digits
    if len(text.lstrip("-")) > 20:
        _finite_float(text)
    return int(text)


def check_shape(where: str, shape: Any, itemsize: int) -> tuple[int, ...]:
    """`shape` as a tuple after proving NumPy can make it: at most 64 ints >= 0 whose byte size
    (zero dimensions aside, as NumPy counts) stays below 2**63. `where` starts the error's message.

    Example:
        >>> check_shape("m.ember: tensor 'w'", [2, 3], 4)
        (2, 3)
    """
    if (not isinstance(shape, (list, tuple)) or len(shape) > MAX_DIMS
            or not all(type(d) is int and d >= 0 for d in shape)):
        raise StoreError(f"{where}: shape must be a list of at most {MAX_DIMS} non-negative ints, got {brief(shape)}")
    if math.prod(max(d, 1) for d in shape) * itemsize >= 1 << 63:
        raise StoreError(f"{where}: shape {brief(shape)} is larger than any array can be")
    return tuple(shape)
