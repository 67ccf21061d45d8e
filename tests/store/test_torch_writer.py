"""Writing PyTorch files: torch.load(weights_only=True) is the oracle."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ember.errors import StoreError
from ember.store.torch_pickle import load_torch
from ember.store.torch_writer import save_torch

from .conftest import assert_same_state, to_numpy


def test_torch_reads_every_dtype_and_shape(tmp_path, every_dtype_state):
    path = tmp_path / "all.pt"
    save_torch(path, every_dtype_state)
    loaded = torch.load(path, weights_only=True)
    assert list(loaded) == list(every_dtype_state)
    assert_same_state({k: to_numpy(v) for k, v in loaded.items()}, every_dtype_state)
    assert_same_state(load_torch(path)[0], every_dtype_state)


def test_non_contiguous_inputs_become_contiguous_tensors(tmp_path):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    state = {"t": base.T, "s": base[::2, ::3], "big_int": np.array([2**40, -(2**62)], np.int64)}
    save_torch(tmp_path / "m.pt", state)
    loaded = torch.load(tmp_path / "m.pt", weights_only=True)
    for key, array in state.items():
        np.testing.assert_array_equal(loaded[key].numpy(), array)
        assert loaded[key].is_contiguous()


def test_records_are_64_byte_aligned(tmp_path, every_dtype_state):
    path = tmp_path / "m.pt"
    save_torch(path, every_dtype_state)
    state, _ = load_torch(path)  # views into the page-aligned map: addresses are file offsets mod 64
    assert all(a.__array_interface__["data"][0] % 64 == 0 for a in state.values() if a.size)


def test_a_torch_module_loads_what_we_wrote(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    state = {k: to_numpy(v) for k, v in model.state_dict().items()}
    save_torch(tmp_path / "m.pt", state)
    fresh = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    fresh.load_state_dict(torch.load(tmp_path / "m.pt", weights_only=True))
    for key, value in fresh.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), state[key])


def test_metadata_is_refused(tmp_path):
    with pytest.raises(StoreError, match="PyTorch files carry no metadata"):
        save_torch(tmp_path / "m.pt", {}, metadata={"epoch": "1"})


def test_failed_write_leaves_the_old_file_intact(tmp_path, monkeypatch):
    path = tmp_path / "m.pt"
    save_torch(path, {"w": np.ones(8, np.float32)})
    before = path.read_bytes()

    def exploding_bytes(array):
        raise OSError("disk full")

    monkeypatch.setattr("ember.store.torch_writer.little_endian_bytes", exploding_bytes)
    with pytest.raises(OSError, match="disk full"):
        save_torch(path, {"w": np.zeros(8, np.float32)})
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.pt"]
