"""Sharded checkpoints through their index JSON, shards written by the reference packages."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ember import store
from ember.errors import StoreError
from ember.store.sharded import load_sharded

from .conftest import assert_same_state

STATE = {"embed.weight": np.arange(12, dtype=np.float32).reshape(4, 3), "layer.0.w": np.ones((3, 3), np.float16),
         "layer.1.w": np.full((3, 3), 2, np.float16), "head.bias": np.arange(4, dtype=np.int64)}


def write_shards(folder, ext: str) -> str:
    halves = [dict(list(STATE.items())[:2]), dict(list(STATE.items())[2:])]
    weight_map = {}
    for i, half in enumerate(halves, 1):
        shard = f"model-0000{i}-of-00002{ext}"
        if ext == ".safetensors":
            pytest.importorskip("safetensors.numpy").save_file(half, str(folder / shard))
        else:
            torch.save({k: torch.from_numpy(v) for k, v in half.items()}, folder / shard)
        weight_map.update({k: shard for k in half})
    index = folder / f"model{ext}.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 1234}, "weight_map": weight_map}))
    return str(index)


@pytest.mark.parametrize("ext", [".safetensors", ".bin"])
def test_load_sharded_merges_the_shards(tmp_path, ext):
    index = write_shards(tmp_path, ext)
    state, metadata = store.load(index)
    assert_same_state(state, STATE)
    assert metadata == {"total_size": "1234"}


def test_index_errors_name_the_index_and_the_problem(tmp_path):
    index = tmp_path / "model.safetensors.index.json"
    write_shards(tmp_path, ".safetensors")
    good = json.loads(index.read_text())

    def refused(content) -> str:
        index.write_text(content if isinstance(content, str) else json.dumps(content))
        with pytest.raises(StoreError) as e:
            load_sharded(index)
        assert str(index) in str(e.value)
        return str(e.value)

    assert "not valid JSON" in refused("{")
    assert "'weight_map' object" in refused({"metadata": {}})
    moved = {**good["weight_map"], "head.bias": "model-00001-of-00002.safetensors"}
    assert "puts 'head.bias' in 'model-00001-of-00002.safetensors', which does not hold it" in refused(
        {"weight_map": moved})
    assert "is not a file" in refused({"weight_map": {"x": "missing.safetensors"}})
    assert "plain file name" in refused({"weight_map": {"x": "../elsewhere.safetensors"}})
    assert "plain file name" in refused({"weight_map": {"x": "/etc/passwd"}})


def test_sharded_checkpoints_are_read_only_through_the_front_door(tmp_path):
    with pytest.raises(StoreError, match="reads sharded checkpoints but writes single files"):
        store.save(tmp_path / "model.index.json", STATE)
