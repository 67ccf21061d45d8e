"""Damaged native files: each either raises StoreError naming the file, or loads exactly what it
says. The format is canonical, so "what it says" has an independent check: `save_native` of the
loaded state and metadata writes the same file (the same parsed header, the same bytes after it).
"""

from __future__ import annotations

import json
import os
import struct
import tempfile

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ember.errors import StoreError
from ember.store.native import load_native, save_native

from .conftest import FUZZ, attempt
from .mutators import damaged, json_edit

STATE = {"w": np.arange(15, dtype=np.float32).reshape(3, 5), "b": np.arange(3, dtype=np.int64),
         "h": np.ones((2, 1), ml_dtypes.bfloat16), "m": np.array([True, False, True]), "e": np.zeros((0, 7), np.int8),
         "s": np.array(7, np.uint8), "d": np.full(9, -2.5, np.float64)}
METADATA = {"format": "ember", "epoch": "3"}


def native_bytes(state, metadata) -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "m.ember")
        save_native(path, state, metadata)
        with open(path, "rb") as f:
            return f.read()


GOOD = native_bytes(STATE, METADATA)


def _parts(raw: bytes) -> tuple[bytes, dict, bytes]:
    (n,) = struct.unpack_from("<Q", raw, 8)
    return raw[:8], json.loads(raw[16:16 + n]), raw[16 + n:]


def check(path) -> None:
    got, _ = attempt(load_native, path, error=StoreError, names=(path,))
    if got is not None:
        assert _parts(native_bytes(*got)) == _parts(path.read_bytes()), "the loaded state is not what the file says"


@pytest.fixture
def path(tmp_path):
    return tmp_path / "m.ember"


@FUZZ
@given(data=st.data())
def test_damaged_bytes(path, data):
    path.write_bytes(data.draw(damaged(GOOD)))
    check(path)


@FUZZ
@given(data=st.data())
def test_damaged_headers(path, data):
    _, header, body = _parts(GOOD)
    edited, renames = data.draw(json_edit(header))
    text = json.dumps(edited, separators=(",", ":"))
    for old, new in renames:
        text = text.replace(old, new, 1)
    raw = text.encode() + b" " * (-(16 + len(text.encode())) % 64)
    path.write_bytes(GOOD[:8] + struct.pack("<Q", len(raw)) + raw + body)
    check(path)


def test_every_single_bit_flip_of_the_header(path):
    (n,) = struct.unpack_from("<Q", GOOD, 8)
    for at in range(16 + n):
        for bit in range(8):
            flipped = bytearray(GOOD)
            flipped[at] ^= 1 << bit
            path.write_bytes(bytes(flipped))
            check(path)
