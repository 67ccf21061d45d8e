"""Positional encodings (ember/nn/positional.py) against direct NumPy loops over the formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember
from ember.nn.positional import PositionalEncoding, RotaryEncoding
from nn.torch_twin import DEVICE


def sinusoid_reference(length: int, d: int, offset: int = 0) -> np.ndarray:
    pe = np.zeros((length, d))
    for pos in range(length):
        for i in range(d // 2):
            angle = (pos + offset) / 10000 ** (2 * i / d)
            pe[pos, 2 * i], pe[pos, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return pe


def rope_reference(x: np.ndarray, offset: int, interleaved: bool, sign: float = 1.0) -> np.ndarray:
    """Rotate pairs of the last dim of (..., L, d) by sign * position * 10000^(-2i/d), one pair at a time."""
    d = x.shape[-1]
    out = x.copy()
    for pos in range(x.shape[-2]):
        for i in range(d // 2):
            a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + d // 2)
            angle = sign * (pos + offset) * 10000 ** (-2 * i / d)
            x1, x2 = x[..., pos, a], x[..., pos, b]
            out[..., pos, a] = x1 * math.cos(angle) - x2 * math.sin(angle)
            out[..., pos, b] = x1 * math.sin(angle) + x2 * math.cos(angle)
    return out


@pytest.mark.parametrize("offset", [0, 7])
def test_sinusoidal_encoding_matches_the_formula(offset):
    x = np.random.default_rng(0).standard_normal((2, 6, 10))
    y = PositionalEncoding(10)(ember.tensor(x), offset=offset)
    np.testing.assert_allclose(y.numpy(), x + sinusoid_reference(6, 10, offset), rtol=1e-12, atol=1e-12)


def test_sinusoidal_encoding_dropout_only_in_training():
    pe = PositionalEncoding(8, dropout=0.5)
    x = ember.zeros(1, 50, 8)
    dropped = pe(x).numpy()
    assert (dropped == 0).any()
    kept = dropped != 0
    np.testing.assert_allclose(dropped[kept], 2 * sinusoid_reference(50, 8)[None][kept], rtol=1e-6)
    pe.eval()
    np.testing.assert_allclose(pe(x).numpy()[0], sinusoid_reference(50, 8), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("offset", [0, 5])
def test_rope_matches_the_formula_with_gradient(interleaved, offset):
    rng = np.random.default_rng(1)
    x, cot = rng.standard_normal((2, 3, 4, 8)), rng.standard_normal((2, 3, 4, 8))
    rope = RotaryEncoding(8, interleaved=interleaved)
    xe = ember.tensor(x, device=DEVICE).require_grad()
    y = rope(xe, offset=offset)
    np.testing.assert_allclose(y.numpy(), rope_reference(x, offset, interleaved), rtol=1e-12, atol=1e-12)
    grads = (y * ember.tensor(cot, device=DEVICE)).sum().backward()
    # A rotation's gradient is the inverse rotation of the cotangent.
    np.testing.assert_allclose(xe.grad(grads).numpy(), rope_reference(cot, offset, interleaved, sign=-1.0),
                               rtol=1e-12, atol=1e-12)


def test_rope_scores_depend_only_on_relative_position():
    rng = np.random.default_rng(2)
    q, k = (ember.tensor(rng.standard_normal((1, 16))) for _ in range(2))
    rope = RotaryEncoding(16)
    score = lambda i, j: (rope(q, offset=i) * rope(k, offset=j)).sum().item()  # noqa: E731
    assert score(3, 1) == pytest.approx(score(12, 10), rel=1e-9)
    assert score(3, 1) != pytest.approx(score(3, 2), rel=1e-3)


def test_rejects_odd_sizes_and_mismatched_inputs():
    with pytest.raises(ember.ShapeError, match="even"):
        RotaryEncoding(7)
    with pytest.raises(ember.ShapeError, match="even"):
        PositionalEncoding(5)
    with pytest.raises(ember.ShapeError, match=r"\(\.\.\., length, 8\)"):
        RotaryEncoding(8)(ember.zeros(2, 6))
