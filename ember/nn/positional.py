"""Position information for attention: `PositionalEncoding` (sinusoidal, added) and `RotaryEncoding`
(RoPE, rotating query/key feature pairs).

Both compute their tables on the host from the positions they are asked for (a few sin/cos per
element), so there is no maximum length and nothing to save in a state dict. `offset` gives the
absolute position of the first element, for incremental decoding with a KV cache.

Example:
    >>> pe = PositionalEncoding(16)
    >>> pe(ember.zeros(2, 5, 16)).shape
    (2, 5, 16)
"""

from __future__ import annotations

import numpy as np

from ..api.creation import from_numpy
from ..api.shape import cat, stack
from ..errors import ShapeError
from ..tensor import Tensor
from .dropout import dropout
from .module import Module


def _frequencies(dim: int, base: float) -> np.ndarray:
    """`base^(-2i/dim)` for i in [0, dim/2): the angular frequency of feature pair i."""
    return base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)


def _angles(length: int, offset: int, dim: int, base: float) -> np.ndarray:
    """(length, dim/2) angles `position * frequency_i` for positions offset .. offset + length - 1."""
    positions = np.arange(offset, offset + length, dtype=np.float64)
    return np.outer(positions, _frequencies(dim, base))


def _check_even(layer: str, dim: int) -> None:
    if dim <= 0 or dim % 2:
        raise ShapeError(layer, f"the feature size must be positive and even, got {dim}")


class PositionalEncoding(Module):
    """Add the sinusoidal encoding of "Attention is all you need", then dropout.

        PE[pos, 2i]     = sin(pos / base^(2i / d_model))
        PE[pos, 2i + 1] = cos(pos / base^(2i / d_model))
        y = dropout(x + PE[offset : offset + L])

    Args:
        d_model: feature size (even).
        dropout: probability of dropping elements of the sum, in training mode.
        base: the wavelength scale (10000 in the paper).
    `forward(x, offset=0)` takes x of shape (..., L, d_model) (batch first).

    Example:
        >>> PositionalEncoding(4)(ember.zeros(1, 2, 4, dtype="f64")).numpy().round(3).tolist()
        [[[0.0, 1.0, 0.0, 1.0], [0.841, 0.54, 0.01, 1.0]]]
    """

    def __init__(self, d_model: int, dropout: float = 0.0, base: float = 10000.0) -> None:
        _check_even("PositionalEncoding", d_model)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"PositionalEncoding: dropout must be in [0, 1), got {dropout}")
        self.d_model, self.dropout, self.base = d_model, dropout, base

    def table(self, length: int, offset: int = 0) -> np.ndarray:
        """The (length, d_model) encoding of positions offset .. offset + length - 1, as f64."""
        angles = _angles(length, offset, self.d_model, self.base)
        return np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(length, self.d_model)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        if x.ndim < 2 or x.shape[-1] != self.d_model:
            raise ShapeError("PositionalEncoding", f"input must be (..., length, {self.d_model}), got {x.shape}")
        pe = from_numpy(self.table(x.shape[-2], offset).astype(x.dtype.np), x.device.inner)
        y = x + pe
        return dropout(y, self.dropout, self.training)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, dropout={self.dropout}"


class RotaryEncoding(Module):
    """Rotary position embedding (RoPE, Su et al. 2021): rotate each feature pair of a query or key by
    an angle proportional to its position, so q.k depends on positions only through their difference.

    For feature pair i of a vector at position p, with theta_i = base^(-2i / dim) and a = p * theta_i:
        (x1', x2') = (x1 cos a - x2 sin a,  x1 sin a + x2 cos a)
    Pairs follow the half-split convention by default (GPT-NeoX, HuggingFace Llama): pair i is features
    (i, i + dim/2). With `interleaved=True` pair i is features (2i, 2i + 1) (the paper, Meta's Llama).

    Args:
        dim: the rotated feature size (the head width; even).
        base: the frequency base (10000 in the paper).
        interleaved: the pairing convention (see above).
    `forward(x, offset=0)` takes x of shape (..., L, dim), e.g. (B, heads, L, head_dim).

    Example:
        >>> rope = RotaryEncoding(8)
        >>> q = rope(ember.randn(2, 4, 5, 8))       # (batch, heads, length, head_dim)
        >>> q.shape
        (2, 4, 5, 8)
    """

    def __init__(self, dim: int, base: float = 10000.0, interleaved: bool = False) -> None:
        _check_even("RotaryEncoding", dim)
        self.dim, self.base, self.interleaved = dim, base, interleaved

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        if x.ndim < 2 or x.shape[-1] != self.dim:
            raise ShapeError("RotaryEncoding", f"input must be (..., length, {self.dim}), got {x.shape}")
        return rotate_pairs(x, _angles(x.shape[-2], offset, self.dim, self.base), self.interleaved)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, interleaved={self.interleaved}"


def rotate_pairs(x: Tensor, angles: np.ndarray | Tensor, interleaved: bool = False, scale: float = 1.0) -> Tensor:
    """Rotate the feature pairs of x (..., L, dim) by `angles` (L, dim/2), RoPE's rotation; `scale`
    multiplies cos and sin (HF's `attention_scaling` of YaRN-style variants). Host angles are the usual
    case; a tensor of angles (a traced length, in ONNX export) takes its cos and sin with tensor ops.

    Example:
        >>> rotate_pairs(ember.ones(1, 2, 4), np.zeros((2, 2))).tolist()[0][0]
        [1.0, 1.0, 1.0, 1.0]
    """
    if isinstance(angles, Tensor):
        cos, sin = angles.cos(), angles.sin()
        if scale != 1.0:
            cos, sin = cos * scale, sin * scale
        cos, sin = cos.cast(x.dtype), sin.cast(x.dtype)
    else:
        cos = from_numpy((np.cos(angles) * scale).astype(x.dtype.np), x.device.inner)
        sin = from_numpy((np.sin(angles) * scale).astype(x.dtype.np), x.device.inner)
    if interleaved:
        pairs = x.reshape(x.shape[:-1] + (x.shape[-1] // 2, 2))
        x1, x2 = pairs[..., 0], pairs[..., 1]
        rotated = stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
        return rotated.reshape(x.shape)
    x1, x2 = x.chunk(2, dim=-1)
    return cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
