"""Damaged safetensors files against the reference package: ember loads exactly what
`safetensors.numpy.load_file` loads, and rejects with StoreError what it rejects.

Two documented differences: duplicate names (the reference keeps the last) and dtypes ember does
not hold (U16, F8_*, ...) are refused by ember. bf16 is left out of the files: the reference's
NumPy loader cannot hold it.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.numpy import load_file, save

from ember.errors import StoreError
from ember.store.safetensors import load_safetensors

from .conftest import FUZZ, assert_same_state, attempt
from .mutators import damaged, json_edit

STATE = {"w": np.arange(15, dtype=np.float32).reshape(3, 5), "b": np.arange(3, dtype=np.int64),
         "h": np.ones((2, 1), np.float16), "m": np.array([True, False, True]), "e": np.zeros((0, 7), np.int8),
         "s": np.array(7, np.uint8)}
METADATA = {"format": "np", "epoch": "3"}
# what ember refuses although the reference loads it (see the module docstring)
STRICTER = ("duplicate key", "is not one ember holds")


def reference(path) -> tuple[dict[str, np.ndarray], dict[str, str]] | None:
    try:
        state = load_file(str(path))
        with safe_open(str(path), "np") as f:
            return state, f.metadata() or {}
    except Exception:  # the reference raises SafetensorError, or NumPy's errors for shapes it cannot make
        return None


def check_against_reference(path) -> None:
    got, message = attempt(load_safetensors, path, error=StoreError, names=(path,))
    want = reference(path)
    if got is None:
        assert want is None or any(s in message for s in STRICTER), f"the reference loads it; ember: {message}"
        return
    assert want is not None, "ember loads a file the reference rejects"
    assert_same_state(got, want)


GOOD = save(STATE, metadata=METADATA)


@pytest.fixture
def path(tmp_path):
    return tmp_path / "m.safetensors"


def _header(raw: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack_from("<Q", raw)
    return json.loads(raw[8:8 + n]), raw[8 + n:]


@FUZZ
@given(data=st.data())
def test_damaged_bytes(path, data):
    path.write_bytes(data.draw(damaged(GOOD)))
    check_against_reference(path)


@FUZZ
@given(data=st.data())
def test_damaged_headers(path, data):
    header, buffer = _header(GOOD)
    edited, renames = data.draw(json_edit(header))
    text = json.dumps(edited, separators=(",", ":"))
    for old, new in renames:
        text = text.replace(old, new, 1)
    if data.draw(st.booleans(), label="cut buffer"):
        buffer = buffer[:data.draw(st.integers(0, len(buffer)), label="cut")]
    path.write_bytes(struct.pack("<Q", len(text.encode())) + text.encode() + buffer)
    check_against_reference(path)


def test_every_single_bit_flip_of_the_header(path):
    (n,) = struct.unpack_from("<Q", GOOD)
    for at in range(8 + n):
        for bit in range(8):
            flipped = bytearray(GOOD)
            flipped[at] ^= 1 << bit
            path.write_bytes(bytes(flipped))
            check_against_reference(path)


def test_long_integers_where_the_reference_ignores_them(path):
    """serde_json reads an integer past 64 bits as a float; in a field the reference ignores it loads."""
    header = '{"w": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2], "x": ' + "9" * 31 + "}}"
    path.write_bytes(struct.pack("<Q", len(header)) + header.encode() + b"\x01\x02")
    check_against_reference(path)
    assert load_safetensors(path)[0]["w"].tolist() == [1, 2]
