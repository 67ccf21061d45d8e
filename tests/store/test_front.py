"""The front door: ember.store.save/load choose formats by name, content and extension."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import torch

from ember import store
from ember.errors import StoreError
from ember.store.formats import sniff_format

from .conftest import assert_same_state

STATE = {"enc.w": np.arange(6, dtype=np.float32).reshape(2, 3), "enc.step": np.array(4), "dec.b": np.ones(2)}


@pytest.mark.parametrize("ext,fmt", [(".ember", "native"), (".safetensors", "safetensors")])
def test_save_and_load_by_extension(tmp_path, ext, fmt):
    path = tmp_path / f"m{ext}"
    store.save(path, STATE, metadata={"a": "b"})
    assert sniff_format(path) == fmt
    state, metadata = store.load(path)
    assert_same_state(state, STATE)
    assert metadata == {"a": "b"}


def test_explicit_format_overrides_the_extension(tmp_path):
    path = tmp_path / "weights.dat"
    store.save(path, STATE, format="safetensors")
    assert sniff_format(path) == "safetensors"
    assert_same_state(store.load(path)[0], STATE)


def test_content_wins_over_a_misleading_extension(tmp_path):
    path = tmp_path / "pytorch_model.bin"
    store.save(path, STATE, format="native")
    assert_same_state(store.load(path)[0], STATE)


def test_torch_files_load_through_the_front_door(tmp_path):
    path = tmp_path / "ckpt.pth"
    torch.save({"state_dict": {k: torch.from_numpy(v) for k, v in STATE.items()}, "epoch": 2}, path)
    state, metadata = store.load(path, key="state_dict")
    assert_same_state(state, STATE)
    assert metadata == {}


def test_pt_extension_saves_a_file_torch_loads(tmp_path):
    path = tmp_path / "out.pt"
    store.save(path, STATE)
    assert_same_state({k: v.numpy() for k, v in torch.load(path, weights_only=True).items()}, STATE)


def test_load_options_select_rename_and_cast(tmp_path):
    path = tmp_path / "m.ember"
    store.save(path, STATE)
    state, _ = store.load(path, prefix="enc.", rename=[(r"^w$", "weight")], cast="f16")
    assert list(state) == ["weight", "step"]
    assert state["weight"].dtype == np.float16 and state["step"].dtype == np.int64
    with pytest.raises(StoreError, match="key= selects a checkpoint entry of PyTorch files"):
        store.load(path, key="model")


def test_unknown_extensions_and_formats_are_named(tmp_path):
    with pytest.raises(StoreError, match=r"m\.npz: cannot tell the file format: '\.npz' is not one of"):
        store.save(tmp_path / "m.npz", STATE)
    with pytest.raises(StoreError, match="unknown format 'onnx'"):
        store.save(tmp_path / "m.ember", STATE, format="onnx")
    junk = tmp_path / "m.xyz"
    junk.write_bytes(b"hello world, not a model")
    with pytest.raises(StoreError, match="its contents match no known format and '.xyz' is not one of"):
        store.load(junk)
    wrong = tmp_path / "m.ember"
    wrong.write_bytes(b"not a model at all")
    with pytest.raises(StoreError, match="expected magic b'EMBR', found b'not '"):
        store.load(wrong)


def test_a_safetensors_header_length_that_looks_like_a_pickle_is_still_safetensors(tmp_path):
    path = tmp_path / "m.bin"
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    header += b" " * (0x0580 - len(header))  # the length's first bytes are 80 05, a pickle's PROTO 5
    path.write_bytes(struct.pack("<Q", len(header)) + header + np.ones(2, np.float32).tobytes())
    assert path.read_bytes()[:2] == b"\x80\x05"
    assert sniff_format(path) == "safetensors"
    np.testing.assert_array_equal(store.load(path)[0]["w"], [1, 1])
