"""Damaged PyTorch files (zip and legacy) against `torch.load(weights_only=True)`: whatever ember
loads, torch loads too, with the same tensors (dtype, shape, bytes) and the same non-tensor leaves;
everything else is a StoreError naming the file. ember may refuse more than torch (a damaged zip
CRC, a big-endian legacy file, dtypes it lacks), never less.
"""

from __future__ import annotations

import io
import json
import zipfile

import ml_dtypes
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ember.errors import StoreError
from ember.store.torch_pickle import load_torch

from .conftest import FUZZ, assert_same_state, attempt
from .mutators import damaged


def _checkpoint() -> dict:
    w = torch.arange(15, dtype=torch.float32).reshape(3, 5)
    model = {"w": w, "t": w.t(), "row": w[1], "b": torch.arange(3), "h": torch.ones(2, 1, dtype=torch.float16),
             "bf": torch.full((2,), 1.5, dtype=torch.bfloat16), "m": torch.tensor([True, False]),
             "e": torch.zeros(0, 4, dtype=torch.int8), "s": torch.tensor(7, dtype=torch.uint8)}
    return {"model": model, "epoch": 3, "names": ["a", "b"], "lr": 0.1, "none": None}


def _saved(**options) -> bytes:
    buffer = io.BytesIO()
    torch.save(_checkpoint(), buffer, **options)
    return buffer.getvalue()


ZIP, LEGACY = _saved(), _saved(_use_new_zipfile_serialization=False)
_NODES = 10_000  # the reference's object is walked only this far: these files hold a few dozen parts


def reference(path) -> tuple[dict, dict] | None:
    try:
        obj = torch.load(path, weights_only=True, map_location="cpu")
    except Exception:  # torch's errors for damaged files: RuntimeError, UnpicklingError, EOFError, ...
        return None
    state, metadata = {}, {}
    if isinstance(obj, (dict, list, tuple)):
        _flatten(obj, "", state, metadata, [0])
    else:
        metadata[""] = obj  # not a container: ember refuses it, so it can only mismatch
    return state, metadata


def _numpy(t: torch.Tensor):
    t = t.detach()
    return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if t.dtype == torch.bfloat16 else t.numpy()


def _flatten(obj, prefix: str, state: dict, metadata: dict, seen: list[int]) -> None:
    """docs/store.md's flattening: dotted keys for containers holding tensors, JSON text for other leaves."""
    for k, value in obj.items() if isinstance(obj, dict) else enumerate(obj):
        seen[0] += 1
        assert seen[0] < _NODES, "the reference's object is far larger than what ember loaded"
        key = f"{prefix}{k}"
        if isinstance(value, torch.Tensor):
            state[key] = _numpy(value)
        elif isinstance(value, (dict, list, tuple)) and _holds_tensors(value):
            _flatten(value, key + ".", state, metadata, seen)
        else:
            try:
                metadata[key] = json.dumps(value)
            except TypeError:
                metadata[key] = repr(value)


def _holds_tensors(obj) -> bool:
    values = obj.values() if isinstance(obj, dict) else obj
    return any(isinstance(v, torch.Tensor) or (isinstance(v, (dict, list, tuple)) and _holds_tensors(v))
               for v in values)


def check_against_torch(path) -> None:
    got, _ = attempt(load_torch, path, error=StoreError, names=(path,))
    if got is None:
        return
    want = reference(path)
    assert want is not None, "ember loads a file torch rejects"
    assert_same_state(got, want)


def _rezipped(raw: bytes, edit) -> bytes:
    """The archive with every member passed through `edit(name, data)` and written back with valid CRCs."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(raw)) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            target.writestr(info.filename, edit(info.filename, source.read(info)))
    return out.getvalue()


@pytest.fixture
def path(tmp_path):
    return tmp_path / "m.pt"


@FUZZ
@pytest.mark.parametrize("container", ["zip", "legacy"])
@given(data=st.data())
def test_damaged_bytes(path, container, data):
    path.write_bytes(data.draw(damaged(ZIP if container == "zip" else LEGACY)))
    check_against_torch(path)


@FUZZ
@given(data=st.data())
def test_damaged_pickles_and_records(path, data):
    """Damage inside a zip member, CRCs made good again: the pickle, or a storage record's length."""
    with zipfile.ZipFile(io.BytesIO(ZIP)) as archive:
        names = archive.namelist()
    target = data.draw(st.sampled_from([n for n in names if n.endswith(("data.pkl", "byteorder")) or "/data/" in n]))
    path.write_bytes(_rezipped(ZIP, lambda name, d: data.draw(damaged(d), label=name) if name == target else d))
    check_against_torch(path)


def test_every_single_bit_flip_of_the_pickle(path):
    with zipfile.ZipFile(io.BytesIO(ZIP)) as archive:
        pickle_name = next(n for n in archive.namelist() if n.endswith("data.pkl"))
        pickle = archive.read(pickle_name)
    for at in range(len(pickle)):
        for bit in range(0, 8, 3):  # bits 0, 3, 6 of every byte: a third of the flips, in a CI budget
            flipped = bytearray(pickle)
            flipped[at] ^= 1 << bit
            path.write_bytes(_rezipped(ZIP, lambda name, d: bytes(flipped) if name == pickle_name else d))
            check_against_torch(path)
