"""safetensors: interop both ways with the reference package, round trips, corrupt files."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from ember.errors import StoreError
from ember.store.safetensors import load_safetensors, save_safetensors

from .conftest import assert_same_state


@pytest.fixture
def every_dtype_state(every_dtype_state):
    """Every dtype the format holds: all of ember's but complex128 (safetensors has only C64)."""
    return {k: v for k, v in every_dtype_state.items() if not k.startswith("c128.")}


def test_complex128_is_refused_by_name(tmp_path):
    path = tmp_path / "c.safetensors"
    with pytest.raises(StoreError, match=r"state\['z'\] is c128, which safetensors files cannot hold"):
        save_safetensors(path, {"z": np.zeros(3, np.complex128)})
    assert not path.exists()


@pytest.mark.parametrize("mmap", [True, False])
def test_round_trip_every_dtype_and_shape(tmp_path, every_dtype_state, mmap):
    path = tmp_path / "m.safetensors"
    save_safetensors(path, every_dtype_state, metadata={"format": "np"})
    state, metadata = load_safetensors(path, mmap=mmap)
    assert_same_state(state, every_dtype_state)
    assert metadata == {"format": "np"}


def reference():
    """The `safetensors` package, the oracle; skipped where absent (add it to the test extra)."""
    return pytest.importorskip("safetensors.numpy")


def test_reference_package_reads_what_we_write(tmp_path, every_dtype_state):
    load_file = reference().load_file
    path = tmp_path / "ours.safetensors"
    save_safetensors(path, every_dtype_state, metadata={"a": "b"})
    assert_same_state(load_file(str(path)), every_dtype_state)
    from safetensors import safe_open
    with safe_open(str(path), framework="np") as f:
        assert f.metadata() == {"a": "b"}


def test_we_read_what_the_reference_package_writes(tmp_path, every_dtype_state):
    save_file = reference().save_file
    path = tmp_path / "theirs.safetensors"
    save_file(every_dtype_state, str(path), metadata={"x": "y"})
    state, metadata = load_safetensors(path)
    assert_same_state(state, every_dtype_state)
    assert metadata == {"x": "y"}


def test_tensors_are_aligned_to_their_element_size(tmp_path, every_dtype_state):
    path = tmp_path / "m.safetensors"
    save_safetensors(path, every_dtype_state)
    state, _ = load_safetensors(path)
    assert all(a.flags.aligned for a in state.values())


def test_no_metadata_means_no_metadata_key(tmp_path):
    path = tmp_path / "m.safetensors"
    save_safetensors(path, {"w": np.ones(2, np.float32)})
    raw = path.read_bytes()
    (n,) = struct.unpack_from("<Q", raw)
    assert "__metadata__" not in json.loads(raw[8:8 + n])
    assert load_safetensors(path)[1] == {}


def _corrupt(path, data: bytes) -> str:
    path.write_bytes(data)
    with pytest.raises(StoreError) as e:
        load_safetensors(path)
    assert str(path) in str(e.value)
    return str(e.value)


def _file(header: dict, data: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def test_corrupt_files_name_the_file_and_the_problem(tmp_path):
    path = tmp_path / "m.safetensors"
    save_safetensors(path, {"w": np.arange(256, dtype=np.float32)})
    good = path.read_bytes()
    (n,) = struct.unpack_from("<Q", good)
    assert "truncated" in _corrupt(path, good[:5])
    assert f"tensor 'w' needs bytes {8 + n}..{8 + n + 1024} but the file has 500" in _corrupt(path, good[:500])
    assert "header needs bytes 8.." in _corrupt(path, good[:8] + b"{}")
    assert "100 MB limit" in _corrupt(path, struct.pack("<Q", 2**40) + b"{}")
    assert "not valid JSON" in _corrupt(path, good[:8] + b"[" + good[9:])
    ok = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    assert "'F8_E4M3' is not one ember holds" in _corrupt(path, _file({"w": {**ok, "dtype": "F8_E4M3"}}, bytes(8)))
    assert "span 4 bytes but f32 (2,) needs 8" in _corrupt(path, _file({"w": {**ok, "data_offsets": [0, 4]}}, bytes(8)))
    assert "data_offsets must be" in _corrupt(path, _file({"w": {**ok, "data_offsets": [8, 0]}}, bytes(8)))
    assert "'__metadata__' must be" in _corrupt(path, _file({"__metadata__": {"a": 1}}))


def test_metadata_key_cannot_name_a_tensor(tmp_path):
    with pytest.raises(StoreError, match="reserved"):
        save_safetensors(tmp_path / "m.safetensors", {"__metadata__": np.ones(1)})


def test_failed_write_leaves_the_old_file_intact(tmp_path, monkeypatch):
    path = tmp_path / "m.safetensors"
    save_safetensors(path, {"w": np.ones(8, np.float32)})
    before = path.read_bytes()

    def exploding_bytes(array):
        raise OSError("disk full")

    monkeypatch.setattr("ember.store.safetensors.little_endian_bytes", exploding_bytes)
    with pytest.raises(OSError, match="disk full"):
        save_safetensors(path, {"w": np.zeros(8, np.float32)})
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.safetensors"]
