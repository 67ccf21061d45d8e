"""IDX reader on files written here byte by byte with struct, plus corrupt and truncated ones."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from ember.data import DataError
from ember.data.vision import read_idx


def write_idx(path: Path, array: np.ndarray, type_byte: int, fmt: str) -> None:
    """An IDX file per the published format, independent of the reader under test."""
    header = bytes([0, 0, type_byte, array.ndim]) + b"".join(struct.pack(">I", d) for d in array.shape)
    body = b"".join(struct.pack(">" + fmt, v) for v in array.ravel().tolist())
    data = header + body
    if path.suffix == ".gz":
        data = gzip.compress(data)
    path.write_bytes(data)


@pytest.mark.parametrize("type_byte,fmt,dtype", [(0x08, "B", np.uint8), (0x09, "b", np.int8),
                                                 (0x0B, "h", np.int16), (0x0C, "i", np.int32),
                                                 (0x0D, "f", np.float32), (0x0E, "d", np.float64)])
@pytest.mark.parametrize("name", ["a.idx", "a.idx.gz"])
def test_every_type_round_trips(tmp_path: Path, type_byte: int, fmt: str, dtype: type, name: str) -> None:
    rng = np.random.default_rng(type_byte)
    array = (rng.standard_normal((3, 4, 2)) * 50).astype(dtype)
    write_idx(tmp_path / name, array, type_byte, fmt)
    got = read_idx(tmp_path / name)
    assert got.dtype == np.dtype(dtype) and got.dtype.isnative
    np.testing.assert_array_equal(got, array)


def test_magic_is_checked(tmp_path: Path) -> None:
    write_idx(tmp_path / "labels", np.arange(5, dtype=np.uint8), 0x08, "B")
    assert read_idx(tmp_path / "labels", magic=2049).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(DataError, match=r"expected IDX magic number 2051 \(0x00000803\), found 2049"):
        read_idx(tmp_path / "labels", magic=2051)


@pytest.mark.parametrize("data,message", [
    (b"\x01\x00\x08\x01\x00\x00\x00\x01\x05", "not an IDX file: magic number 0x01000801"),
    (b"\x00\x00\x07\x01\x00\x00\x00\x01\x05", "not an IDX file"),
    (b"\x00\x00", "too short"),
    (b"\x00\x00\x08\x02\x00\x00\x00\x02", "truncated IDX header"),
    (b"\x00\x00\x08\x01\x00\x00\x00\x03\x01\x02", r"shape \(3,\) of uint8 \(11 bytes with header\), file has 10"),
])
def test_corrupt_files_are_rejected(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "bad-idx1-ubyte"
    path.write_bytes(data)
    with pytest.raises(DataError, match=message):
        read_idx(path)


def test_broken_gzip(tmp_path: Path) -> None:
    path = tmp_path / "x.gz"
    path.write_bytes(gzip.compress(b"\x00\x00\x08\x01\x00\x00\x00\x04abcd")[:-6])
    with pytest.raises(DataError, match="cannot read IDX file"):
        read_idx(path)
