"""Damaged sharded-checkpoint indexes: each either raises StoreError naming a file, or loads exactly
the tensors its weight map names, as the reference package reads them from the shards it names.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from safetensors.numpy import load_file, save_file

from ember.errors import StoreError
from ember.store.sharded import load_sharded

from .conftest import FUZZ, attempt
from .mutators import damaged, json_edit

SHARDS = {"model-00001-of-00002.safetensors": {"embed": np.arange(6, dtype=np.float32).reshape(2, 3),
                                               "norm": np.ones(3, np.float32)},
          "model-00002-of-00002.safetensors": {"head": np.arange(4, dtype=np.int64)}}
INDEX = {"metadata": {"total_size": 56, "format": "pt"},
         "weight_map": {key: shard for shard, state in SHARDS.items() for key in state}}


@pytest.fixture
def index(tmp_path):
    for shard, state in SHARDS.items():
        save_file(state, str(tmp_path / shard))
    return tmp_path / "model.safetensors.index.json"


def check(index) -> None:
    folder = index.parent
    got, _ = attempt(load_sharded, index, error=StoreError, names=(index, folder))
    if got is None:
        return
    state, metadata = got
    written = json.loads(index.read_bytes())
    assert metadata == {k: v if isinstance(v, str) else json.dumps(v) for k, v in written.get("metadata", {}).items()}
    assert list(state) == list(written["weight_map"])
    for key, shard in written["weight_map"].items():
        want = load_file(str(folder / shard))
        assert set(want) == {k for k, s in written["weight_map"].items() if s == shard}
        assert (state[key].dtype, state[key].shape, state[key].tobytes()) == (
            want[key].dtype, want[key].shape, want[key].tobytes()), key


@FUZZ
@given(data=st.data())
def test_damaged_index_bytes(index, data):
    index.write_bytes(data.draw(damaged(json.dumps(INDEX).encode())))
    check(index)


@FUZZ
@given(data=st.data())
def test_damaged_index_documents(index, data):
    edited, renames = data.draw(json_edit(INDEX))
    text = json.dumps(edited, separators=(",", ":"))
    for old, new in renames:
        text = text.replace(old, new, 1)
    index.write_text(text)
    check(index)
