"""The native format: round trips, 64-byte alignment, zero-copy mmap, corrupt files, atomic writes."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from ember.errors import StoreError
from ember.store.native import ALIGNMENT, load_native, save_native

from .conftest import assert_same_state


def _header(path) -> tuple[int, dict]:
    raw = path.read_bytes()
    (length,) = struct.unpack_from("<Q", raw, 8)
    return 16 + length, json.loads(raw[16:16 + length])


@pytest.mark.parametrize("mmap", [True, False])
def test_round_trip_every_dtype_and_shape(tmp_path, every_dtype_state, mmap):
    path = tmp_path / "m.ember"
    save_native(path, every_dtype_state, metadata={"epoch": "3", "note": "héllo"})
    state, metadata = load_native(path, mmap=mmap)
    assert_same_state(state, every_dtype_state)
    assert list(state) == list(every_dtype_state)
    assert metadata == {"epoch": "3", "note": "héllo"}
    assert all(a.flags.writeable != mmap for a in state.values())


def test_non_contiguous_and_big_endian_inputs_are_stored_as_values(tmp_path):
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    state = {"t": base.T, "s": base[::2, 1::3], "be": np.arange(5, dtype=">i4")}
    save_native(tmp_path / "m.ember", state)
    got, _ = load_native(tmp_path / "m.ember")
    np.testing.assert_array_equal(got["t"], base.T)
    np.testing.assert_array_equal(got["s"], base[::2, 1::3])
    np.testing.assert_array_equal(got["be"], np.arange(5))


def test_every_tensor_is_64_byte_aligned_in_file_and_in_memory(tmp_path, every_dtype_state):
    path = tmp_path / "m.ember"
    save_native(path, every_dtype_state)
    data_start, header = _header(path)
    assert data_start % ALIGNMENT == 0
    for entry in header["tensors"].values():
        assert entry["offset"] % ALIGNMENT == 0
    state, _ = load_native(path)
    for array in state.values():
        if array.size:
            assert array.__array_interface__["data"][0] % ALIGNMENT == 0


def test_mmap_is_zero_copy_writes_to_the_file_show_through(tmp_path):
    path = tmp_path / "m.ember"
    save_native(path, {"w": np.zeros(16, np.float32)})
    state, _ = load_native(path, mmap=True)
    view = state["w"]
    assert not view.flags.owndata and not view.flags.writeable
    data_start, header = _header(path)
    with open(path, "r+b") as f:  # rewrite element 3 behind numpy's back
        f.seek(data_start + header["tensors"]["w"]["offset"] + 3 * 4)
        f.write(np.float32(7.5).tobytes())
    assert view[3] == 7.5


def test_mmap_false_copies(tmp_path):
    path = tmp_path / "m.ember"
    save_native(path, {"w": np.zeros(4, np.float32)})
    state, _ = load_native(path, mmap=False)
    path.write_bytes(b"")
    state["w"][0] = 1.0
    np.testing.assert_array_equal(state["w"], [1, 0, 0, 0])


def _corrupt(path, data: bytes) -> str:
    path.write_bytes(data)
    with pytest.raises(StoreError) as e:
        load_native(path)
    assert str(path) in str(e.value)
    return str(e.value)


def test_corrupt_files_name_the_file_and_the_problem(tmp_path):
    path = tmp_path / "m.ember"
    save_native(path, {"w": np.arange(1024, dtype=np.float32)})
    good = path.read_bytes()
    assert "expected magic b'EMBR', found b'XXXX'" in _corrupt(path, b"XXXX" + good[4:])
    assert "preamble" in _corrupt(path, good[:10])
    assert "newer than this ember reads" in _corrupt(path, good[:4] + struct.pack("<I", 2) + good[8:])
    data_start, _ = _header(path)
    msg = _corrupt(path, good[:1000])
    assert f"tensor 'w' needs bytes {data_start}..{data_start + 4096} but the file has 1000" in msg
    assert "header needs bytes" in _corrupt(path, good[:16] + b"{")
    assert "not valid JSON" in _corrupt(path, good[:16] + b"!" + good[17:])


def test_corrupt_header_entries(tmp_path):
    path = tmp_path / "m.ember"

    def write(entry: dict) -> str:
        raw = json.dumps({"metadata": {}, "tensors": {"w": entry}}).encode()
        raw += b" " * (-(16 + len(raw)) % 64)
        return _corrupt(path, b"EMBR" + struct.pack("<IQ", 1, len(raw)) + raw + bytes(64))

    ok = {"dtype": "f32", "shape": [4], "offset": 0, "nbytes": 16}
    assert "unknown dtype 'f128'" in write({**ok, "dtype": "f128"})
    assert "shape must be" in write({**ok, "shape": [-1]})
    assert "multiple of 64" in write({**ok, "offset": 8})
    assert "nbytes is 12 but f32 (4,) needs 16" in write({**ok, "nbytes": 12})
    assert "larger than any array" in write({**ok, "shape": [2**62, 4], "nbytes": 0})  # no int64 wrap-around
    assert "at most 64" in write({**ok, "shape": [1] * 65, "nbytes": 4})


def test_bad_state_is_refused_before_writing(tmp_path):
    path = tmp_path / "m.ember"
    with pytest.raises(StoreError, match="state\\['w'\\] is a list"):
        save_native(path, {"w": [1, 2]})
    with pytest.raises(StoreError, match="dtype uint16"):
        save_native(path, {"w": np.zeros(2, np.uint16)})
    with pytest.raises(StoreError, match="metadata must be a dict of str -> str"):
        save_native(path, {}, metadata={"epoch": 3})
    assert not path.exists()


def test_failed_write_leaves_the_old_file_intact(tmp_path, monkeypatch):
    path = tmp_path / "m.ember"
    save_native(path, {"w": np.ones(8, np.float32)})
    before = path.read_bytes()
    calls = []

    def exploding_bytes(array):
        calls.append(array)
        raise OSError("disk full")

    monkeypatch.setattr("ember.store.native.little_endian_bytes", exploding_bytes)
    with pytest.raises(OSError, match="disk full"):
        save_native(path, {"w": np.zeros(8, np.float32), "b": np.zeros(2, np.int64)})
    assert calls, "the write must have started"
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.ember"], "the temporary file is removed"


def test_replacing_a_mapped_file_keeps_the_old_views_valid(tmp_path):
    path = tmp_path / "m.ember"
    save_native(path, {"w": np.full(1000, 1.0, np.float32)})
    old, _ = load_native(path)
    save_native(path, {"w": np.full(10, 2.0, np.float32)})
    assert (old["w"] == 1.0).all() and old["w"].shape == (1000,)
    assert (load_native(path)[0]["w"] == 2.0).all()
