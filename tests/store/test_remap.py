"""Key remapping, partial selection, dtype casting and tensor transforms."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from ember.errors import DTypeError, StoreError
from ember.store.remap import cast, rename, select, transform


def test_rename_applies_rules_in_order():
    state = {"module.encoder.0.weight": np.zeros(1), "module.head.bias": np.ones(1)}
    out = rename(state, [(r"^module\.", ""), (r"^encoder\.(\d+)\.", r"layers.\1."), (r"layers", "blocks")])
    assert list(out) == ["blocks.0.weight", "head.bias"]
    assert out["head.bias"] is state["module.head.bias"]


def test_rename_refuses_collisions():
    with pytest.raises(StoreError, match="keys 'a.w' and 'b.w' both become 'w'"):
        rename({"a.w": np.zeros(1), "b.w": np.zeros(1)}, [(r"^[ab]\.", "")])


def test_select_by_prefix_and_pattern():
    state = {"encoder.w": np.zeros(1), "encoder.b": np.zeros(1), "decoder.w": np.zeros(1)}
    assert list(select(state, prefix="encoder.")) == ["encoder.w", "encoder.b"]
    assert list(select(state, prefix="encoder.", strip=True)) == ["w", "b"]
    assert list(select(state, pattern=r"\.w$")) == ["encoder.w", "decoder.w"]
    assert list(select(state, prefix="encoder.", pattern=r"\.w$")) == ["encoder.w"]
    with pytest.raises(StoreError, match="no key matches prefix 'encodr.'"):
        select(state, prefix="encodr.")


def test_cast_single_target_touches_floats_only():
    state = {"w": np.arange(4, dtype=np.float32) / 3, "d": np.ones(2), "step": np.array(3), "mask": np.ones(2, bool)}
    out = cast(state, "bf16")
    assert out["w"].dtype == ml_dtypes.bfloat16 and out["d"].dtype == ml_dtypes.bfloat16
    want = torch.from_numpy(state["w"]).bfloat16().view(torch.int16).numpy()  # torch's rounding as oracle
    np.testing.assert_array_equal(out["w"].view(np.int16), want)
    assert out["step"] is state["step"] and out["mask"] is state["mask"]


def test_cast_mapping_is_exact():
    state = {"w": np.ones(2, np.float32), "d": np.ones(2), "step": np.array(3)}
    out = cast(state, {"f32": "f16", "i64": "i32"})
    assert [out[k].dtype for k in state] == [np.float16, np.float64, np.int32]
    assert out["d"] is state["d"]
    with pytest.raises(DTypeError):
        cast(state, "f128")


def test_transform_applies_named_functions():
    state = {"a": np.arange(3), "b": np.arange(2)}
    out = transform(state, {"a": lambda x: x * 2})
    np.testing.assert_array_equal(out["a"], [0, 2, 4])
    assert out["b"] is state["b"]
    with pytest.raises(StoreError, match="no tensor named 'c'"):
        transform(state, {"c": np.transpose})
