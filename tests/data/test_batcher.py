"""default_batcher: stacking against np.stack, structure kept, clear errors; to_device conversion."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pytest

import ember
from ember.data import default_batcher, to_device
from ember.errors import ShapeError


class Pair(NamedTuple):
    x: np.ndarray
    y: int


def test_arrays_stack_along_a_new_first_dim() -> None:
    items = [np.full((2, 3), i, dtype=np.float32) for i in range(4)]
    batch = default_batcher(items)
    np.testing.assert_array_equal(batch, np.stack(items))
    assert batch.dtype == np.float32


def test_python_numbers_and_numpy_scalars() -> None:
    assert default_batcher([1, 2, 3]).dtype == np.int64
    floats = default_batcher([1, 2.5])
    assert floats.dtype == np.float32 and floats.tolist() == [1.0, 2.5]
    assert default_batcher([True, False]).dtype == np.bool_
    np.testing.assert_array_equal(default_batcher([np.uint8(3), np.uint8(4)]), np.array([3, 4], np.uint8))


def test_structure_is_kept() -> None:
    items = [({"a": np.ones(2) * i, "b": i}, Pair(np.zeros(1) + i, -i), "s%d" % i) for i in range(3)]
    batch = default_batcher(items)
    assert isinstance(batch, tuple) and len(batch) == 3
    np.testing.assert_array_equal(batch[0]["a"], np.stack([np.ones(2) * i for i in range(3)]))
    assert batch[0]["b"].tolist() == [0, 1, 2]
    assert isinstance(batch[1], Pair) and batch[1].y.tolist() == [0, -1, -2]
    assert batch[1].x.shape == (3, 1)
    assert batch[2] == ["s0", "s1", "s2"]
    windows = default_batcher([[np.zeros(2), np.ones(2)], [np.ones(2), np.zeros(2)]])
    assert isinstance(windows, list) and windows[0].shape == (2, 2)


def test_errors_name_the_problem() -> None:
    with pytest.raises(ShapeError, match=r"item\[0\] has arrays of different shapes \[\(2,\), \(3,\)\]"):
        default_batcher([(np.zeros(2),), (np.zeros(3),)])
    with pytest.raises(TypeError, match="mix ndarray and str"):
        default_batcher([np.zeros(2), "a"])
    with pytest.raises(ValueError, match="dicts with keys"):
        default_batcher([{"a": 1}, {"b": 1}])
    with pytest.raises(ValueError, match="different lengths"):
        default_batcher([(1, 2), (1,)])
    with pytest.raises(ValueError, match="empty"):
        default_batcher([])


def test_device_conversion_calls_from_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, Any]] = []

    def fake_from_numpy(array: np.ndarray, device: Any = None) -> tuple[str, Any]:
        calls.append((array, device))
        return ("tensor", device)

    monkeypatch.setattr(ember, "from_numpy", fake_from_numpy, raising=False)
    batch = default_batcher([(np.ones(2), 1, "a"), (np.zeros(2), 0, "b")], device="dev")
    assert batch == (("tensor", "dev"), ("tensor", "dev"), ["a", "b"])
    np.testing.assert_array_equal(calls[0][0], [[1, 1], [0, 0]])
    assert to_device({"k": [np.ones(1)]}, "d2") == {"k": [("tensor", "d2")]}


def test_real_tensors_when_the_core_exists() -> None:
    if not hasattr(ember, "from_numpy") or not hasattr(ember, "Device"):
        pytest.skip("ember.from_numpy / ember.Device not in the core yet")
    batch = default_batcher([np.arange(3, dtype=np.float32)] * 2, device=ember.Device.numpy())
    host = batch.numpy() if hasattr(batch, "numpy") else np.asarray(batch)
    np.testing.assert_array_equal(host, np.stack([np.arange(3, dtype=np.float32)] * 2))
