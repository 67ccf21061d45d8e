"""Windows with torch's semantics: `hann_window`, `hamming_window`, `blackman_window`,
`bartlett_window`, `kaiser_window` (torch.*_window, `periodic=True` by default: the first `n` points of
the symmetric window of `n + 1`) and `gaussian` (torch.signal.windows.gaussian, `sym=True` by default).

Values are computed in f64 on the host (a window is a constant of a transform) and made a tensor of
`dtype` (default f32) on `device`.

Example:
    >>> ember.signal.hann_window(4).tolist()
    [0.0, 0.5, 1.0, 0.5]
"""

from __future__ import annotations

import numpy as np

from ..api.creation import tensor
from ..dtype import default_float, dtype_of
from ..errors import ShapeError
from ..tensor import Tensor


def _window(op: str, n: int, periodic: bool, values, dtype, device) -> Tensor:
    if n < 0:
        raise ShapeError(op, f"window length must be non-negative, got {n}")
    if n <= 1:
        return tensor(np.ones(n), dtype=dtype_of(dtype or default_float()), device=device)
    m = n + 1 if periodic else n
    w = values(np.arange(m, dtype=np.float64), m)[:n]
    return tensor(w, dtype=dtype_of(dtype or default_float()), device=device)


def _cosine_sum(*coefficients: float):
    def values(k: np.ndarray, m: int) -> np.ndarray:
        phase = 2 * np.pi * k / (m - 1)
        return sum(c * (-1) ** i * np.cos(i * phase) for i, c in enumerate(coefficients))
    return values


def hann_window(window_length: int, periodic: bool = True, *, dtype=None, device=None) -> Tensor:
    """0.5 - 0.5 cos(2 pi k / (N - 1))."""
    return _window("hann_window", window_length, periodic, _cosine_sum(0.5, 0.5), dtype, device)


def hamming_window(window_length: int, periodic: bool = True, alpha: float = 0.54, beta: float = 0.46, *,
                   dtype=None, device=None) -> Tensor:
    """alpha - beta cos(2 pi k / (N - 1))."""
    return _window("hamming_window", window_length, periodic, _cosine_sum(alpha, beta), dtype, device)


def blackman_window(window_length: int, periodic: bool = True, *, dtype=None, device=None) -> Tensor:
    """0.42 - 0.5 cos(2 pi k / (N - 1)) + 0.08 cos(4 pi k / (N - 1))."""
    return _window("blackman_window", window_length, periodic, _cosine_sum(0.42, 0.5, 0.08), dtype, device)


def bartlett_window(window_length: int, periodic: bool = True, *, dtype=None, device=None) -> Tensor:
    """1 - |2 k / (N - 1) - 1|."""
    return _window("bartlett_window", window_length, periodic,
                   lambda k, m: 1 - np.abs(2 * k / (m - 1) - 1), dtype, device)


def kaiser_window(window_length: int, periodic: bool = True, beta: float = 12.0, *, dtype=None,
                  device=None) -> Tensor:
    """I0(beta sqrt(1 - (2 k / (N - 1) - 1)^2)) / I0(beta)."""
    return _window("kaiser_window", window_length, periodic,
                   lambda k, m: np.i0(beta * np.sqrt(np.clip(1 - (2 * k / (m - 1) - 1) ** 2, 0, None))) / np.i0(beta),
                   dtype, device)


def gaussian(M: int, *, std: float = 1.0, sym: bool = True, dtype=None, device=None) -> Tensor:
    """exp(-((k - (N - 1) / 2) / std)^2 / 2) (torch.signal.windows.gaussian)."""
    if std <= 0:
        raise ValueError(f"gaussian: std must be positive, got {std}")
    return _window("gaussian", M, not sym, lambda k, m: np.exp(-((k - (m - 1) / 2) / std) ** 2 / 2), dtype, device)


__all__ = ["hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window", "gaussian"]
