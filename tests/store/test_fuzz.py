"""Damaged files of every format fail with StoreError (naming the file) or load; nothing else escapes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember.errors import StoreError
from ember.store.native import load_native, save_native
from ember.store.safetensors import load_safetensors, save_safetensors
from ember.store.torch_pickle import load_torch

STATE = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.arange(3, dtype=np.int64)}


def _native(path):
    save_native(path, STATE, {"k": "v"})


def _safetensors(path):
    save_safetensors(path, STATE, {"k": "v"})


def _torch_zip(path):
    torch.save({k: torch.from_numpy(v) for k, v in STATE.items()}, path)


def _torch_legacy(path):
    torch.save({k: torch.from_numpy(v) for k, v in STATE.items()}, path, _use_new_zipfile_serialization=False)


FORMATS = {
    "native": (_native, load_native),
    "safetensors": (_safetensors, load_safetensors),
    "torch-zip": (_torch_zip, load_torch),
    "torch-legacy": (_torch_legacy, load_torch),
}


@pytest.mark.parametrize("fmt", list(FORMATS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_files_raise_store_error_or_load(tmp_path, fmt, data):
    write, load = FORMATS[fmt]
    path = tmp_path / f"m.{fmt}"
    write(path)
    raw = bytearray(path.read_bytes())
    if data.draw(st.booleans(), label="truncate"):
        raw = raw[: data.draw(st.integers(0, len(raw) - 1), label="cut")]
    else:
        for _ in range(data.draw(st.integers(1, 4), label="flips")):
            raw[data.draw(st.integers(0, len(raw) - 1), label="at")] = data.draw(st.integers(0, 255), label="to")
    path.write_bytes(bytes(raw))
    try:
        state, _ = load(path)
    except StoreError as e:
        assert str(path) in str(e)
        return
    for array in state.values():  # whatever loaded must be readable memory
        if array.nbytes < 1 << 20:  # a damaged size can make a huge stride-0 view; reading it all proves nothing
            np.ascontiguousarray(array).tobytes()
