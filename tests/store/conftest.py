"""Shared fixtures for the store tests: one array per ember dtype and per awkward shape."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from ember.dtype import ALL

SHAPES = [(), (0,), (3, 0, 2), (5,), (2, 3), (2, 3, 4)]


def sample(np_dtype: np.dtype, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Random values of every kind a dtype holds (negatives, fractions, bool), deterministic by seed."""
    rng = np.random.default_rng(seed)
    if np_dtype == np.bool_:
        values = rng.random(shape) < 0.5
    elif np.issubdtype(np_dtype, np.integer):
        info = np.iinfo(np_dtype)
        values = rng.integers(info.min, info.max, size=shape, dtype=np_dtype, endpoint=True)
    else:
        values = rng.standard_normal(shape) * 100
    return np.asarray(values, dtype=np_dtype)  # rng gives NumPy scalars, not 0-d arrays, for shape ()


@pytest.fixture
def every_dtype_state() -> dict[str, np.ndarray]:
    """Every ember dtype in every shape of SHAPES, keyed 'f32.2x3' and the like."""
    state = {}
    for i, dtype in enumerate(ALL):
        for j, shape in enumerate(SHAPES):
            state[f"{dtype.name}.{'x'.join(map(str, shape)) or 'scalar'}"] = sample(dtype.np, shape, seed=i * 10 + j)
    return state


def assert_same_state(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    """Same keys, dtypes, shapes and bit-identical values (NaN-safe, bf16-safe)."""
    assert set(got) == set(want)
    for key, array in want.items():
        assert got[key].dtype == array.dtype, key
        assert got[key].shape == array.shape, key
        assert np.ascontiguousarray(got[key]).tobytes() == np.ascontiguousarray(array).tobytes(), key


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """torch's own values as NumPy, bf16 through its bits (torch has no bf16 .numpy())."""
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def to_torch(a: np.ndarray) -> torch.Tensor:
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())
