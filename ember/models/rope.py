"""Rotary position angles of Hugging Face's `rope_type`s: "default", "linear", "dynamic" (NTK-aware) and
"llama3", computed as transformers computes them (f32 on the host, `modeling_rope_utils`).

`RopeAngles(params, head_dim, max_position_embeddings).angles(offset, length)` is the (length, head_dim/2)
table of position * inverse frequency for positions offset .. offset + length - 1, and `scaling` the factor
of cos and sin. "dynamic" recomputes its frequencies from the sequence length offset + length once it
passes `max_position_embeddings` (transformers' `dynamic_rope_update` for a growing sequence). `params`
is the config's `rope_parameters` (transformers 5) or `rope_scaling` (earlier), with `rope_theta`.

Example:
    >>> rope = RopeAngles({"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}, 8, 128)
    >>> rope.angles(0, 3).shape
    (3, 4)
"""

from __future__ import annotations

import math

import numpy as np

from ..api.creation import arange, from_numpy
from ..dtype import f32
from ..errors import ConfigError
from ..tensor import Tensor

ROPE_TYPES = ("default", "linear", "dynamic", "llama3")


class RopeAngles:
    """The rotary angles of one model (see the module docs)."""

    def __init__(self, params: dict | None, head_dim: int, max_position_embeddings: int) -> None:
        params = dict(params or {})
        self.rope_type = params.get("rope_type", params.get("type", "default"))
        if self.rope_type not in ROPE_TYPES:
            raise ConfigError(f"rope_type {self.rope_type!r} is not supported; ember has {list(ROPE_TYPES)}")
        needs = {"linear": ("factor",), "dynamic": ("factor",),
                 "llama3": ("factor", "low_freq_factor", "high_freq_factor")}.get(self.rope_type, ())
        missing = [k for k in needs if k not in params]
        if missing:
            raise ConfigError(f"rope_type {self.rope_type!r} needs {missing} in the config's rope parameters")
        if params.get("partial_rotary_factor", 1.0) != 1.0:
            raise ConfigError("partial_rotary_factor other than 1 is not supported")
        self.params, self.dim, self.max_positions = params, head_dim, max_position_embeddings
        self.base = float(params.get("rope_theta", 10000.0))
        self.scaling = 1.0
        self._fixed = None if self.rope_type == "dynamic" else self._inverse_frequencies(self.base)

    def _inverse_frequencies(self, base: float) -> np.ndarray:
        inv = (1.0 / (np.float32(base) ** (np.arange(0, self.dim, 2).astype(np.float32) / np.float32(self.dim))))
        inv = inv.astype(np.float32)
        p = self.params
        if self.rope_type == "linear":
            inv = inv / np.float32(p["factor"])
        elif self.rope_type == "llama3":
            factor, low, high = p["factor"], p["low_freq_factor"], p["high_freq_factor"]
            old = p.get("original_max_position_embeddings", self.max_positions)
            wavelen = np.float32(2 * math.pi) / inv
            scaled = np.where(wavelen > old / low, inv / np.float32(factor), inv)
            smooth = (np.float32(old) / wavelen - np.float32(low)) / np.float32(high - low)
            smoothed = (1 - smooth) * scaled / np.float32(factor) + smooth * scaled
            medium = ~(wavelen < old / high) & ~(wavelen > old / low)
            inv = np.where(medium, smoothed, scaled)
        return inv.astype(np.float32)

    def inverse_frequencies(self, seq_len: int) -> np.ndarray:
        """The (head_dim/2,) f32 inverse frequencies for a sequence of `seq_len` positions."""
        if self._fixed is not None:
            return self._fixed
        factor, seq = self.params["factor"], max(seq_len, self.max_positions)
        base = self.base * ((factor * seq / self.max_positions) - (factor - 1)) ** (self.dim / (self.dim - 2))
        return self._inverse_frequencies(base)

    def angles(self, offset: int, length: int, device=None) -> np.ndarray | Tensor:
        """(length, head_dim/2) f32 angles of positions offset .. offset + length - 1: on the host, or as
        a tensor on `device` when the length is a traced size (ONNX export), so they follow it."""
        if type(offset) is not int or type(length) is not int:
            positions = arange(offset, offset + length, dtype=f32, device=device)
            inverse = from_numpy(self.inverse_frequencies(int(offset + length)), device)
            return positions.unsqueeze(1) * inverse.unsqueeze(0)
        positions = np.arange(offset, offset + length).astype(np.float32)
        return np.outer(positions, self.inverse_frequencies(offset + length)).astype(np.float32)
