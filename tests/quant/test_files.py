"""Quantized tensors in native and safetensors files (ember/store/quantized.py): exact round trips of
every part and the scheme, modules saved and loaded, the safetensors package reading the parts, and
damaged files failing with a StoreError that names the key."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ember
from ember import nn, quant, store
from ember.errors import StoreError

SCHEMES = [quant.int8(axis=0), quant.int4(block=16, affine=True), quant.nf4(block=8, double_quant=True),
           quant.mxfp4(), quant.fp8_e5m2(), quant.int2(block=5, scale_dtype="bf16")]


@pytest.mark.parametrize("suffix", [".ember", ".safetensors"])
def test_qtensors_round_trip_exactly(tmp_path, rng, suffix):
    state = {f"w{i}": ember.from_numpy(rng.standard_normal((6, 64)).astype(np.float32)).quantize(s)
             for i, s in enumerate(SCHEMES)}
    state["plain"] = np.arange(5, dtype=np.int64)
    path = tmp_path / f"q{suffix}"
    store.save(path, state, metadata={"note": "kept"})
    loaded, metadata = store.load(path)
    assert metadata == {"note": "kept"}
    np.testing.assert_array_equal(loaded["plain"], state["plain"])
    for key, q in state.items():
        if key == "plain":
            continue
        got = loaded[key]
        assert got.scheme == q.scheme and got.shape == q.shape and set(got.parts) == set(q.parts)
        for name, part in q.parts.items():
            np.testing.assert_array_equal(np.asarray(got.parts[name].numpy()).view(np.uint8),
                                          np.asarray(part.numpy()).view(np.uint8))
    if suffix == ".safetensors":
        from safetensors.numpy import load_file
        assert sorted(load_file(path)) == sorted(["plain"] + [f"{k}:{p}" for k, q in state.items()
                                                              if k != "plain" for p in q.parts])


def test_quantized_modules_save_and_load(tmp_path):
    model = quant.quantize_weights(nn.Sequential(nn.Embedding(9, 32), nn.Linear(32, 7)), quant.int4(block=32))
    store.save_module(model, tmp_path / "m.safetensors")
    fresh = quant.quantize_weights(nn.Sequential(nn.Embedding(9, 32), nn.Linear(32, 7)), quant.int4(block=32))
    assert store.load_module(fresh, tmp_path / "m.safetensors").ok
    ids = ember.tensor([[1, 8, 3]])
    np.testing.assert_array_equal(fresh(ids).numpy(), model(ids).numpy())
    float_model = nn.Sequential(nn.Embedding(9, 32), nn.Linear(32, 7))  # a quantized file into float layers
    assert store.load_module(float_model, tmp_path / "m.safetensors").ok
    np.testing.assert_array_equal(float_model[1].weight.numpy(), model[1].weight.dequantize().numpy())
    with pytest.raises(StoreError, match="quantized tensors"):
        store.save_module(model, tmp_path / "m.pt")


def _damaged(tmp_path, edit):
    q = ember.randn(4, 32).quantize(quant.int4(block=16, affine=True))
    arrays, metadata = store.quantized.split({"layer.weight": q})
    edit(arrays, metadata)
    path = tmp_path / "bad.safetensors"
    store.save(path, arrays, metadata)
    return path


@pytest.mark.parametrize("edit, words", [
    (lambda a, m: a.pop("layer.weight:zeros"), ["layer.weight:zeros", "missing"]),
    (lambda a, m: a.update({"layer.weight:scales": np.zeros((4, 3), np.float32)}), ["layer.weight", "(4, 2)"]),
    (lambda a, m: a.update({"layer.weight:scales2": np.zeros(1, np.float32)}), ["layer.weight:scales2", "not parts"]),
    (lambda a, m: m.update({"ember.qtensor:layer.weight": "{not json"}), ["layer.weight", "metadata"]),
    (lambda a, m: m.update({"ember.qtensor:layer.weight": json.dumps({"scheme": {"value": "int5"}, "shape": [4, 32]})}),
     ["layer.weight", "int5"]),
])
def test_damaged_quantized_entries_name_the_key(tmp_path, edit, words):
    path = _damaged(tmp_path, edit)
    with pytest.raises(StoreError) as e:
        store.load(path)
    for word in words:
        assert word in str(e.value)
