"""Signal ONNX ops: DFT and STFT as matmuls by the DFT matrix (ember has no FFT here; exact to float
rounding, O(n^2) in the transform length), MelWeightMatrix (a constant made on the host).

ONNX holds a complex signal as a last dim of 2 (real, imaginary), a real one as a last dim of 1.
DFT's `onesided` keeps the n // 2 + 1 first frequencies; its inverse with `onesided` is the inverse
of a real signal's one-sided spectrum (irfft).

Example:
    >>> OPS[("", "DFT")](call, x, dft_length, axis)   # x (..., n, ..., 2) -> (..., L, ..., 2)
"""

from __future__ import annotations

import numpy as np

from ...api import shape as S
from ...api.linalg import matmul
from .registry import op


def _parts(x):
    """Real and imaginary parts (None for a real signal) of an ONNX signal tensor."""
    re = x[..., 0]
    return re, (x[..., 1] if x.shape[-1] == 2 else None)


def _fit(v, n: int):
    """`v` along its last dim cut or zero-padded to n."""
    m = v.shape[-1]
    return S.narrow(v, v.ndim - 1, 0, n) if m >= n else S.pad(v, [0, n - m])


def _transform(call, re, im, length: int, inverse: bool, onesided: bool):
    """The DFT of length `length` along the last dim of (re, im): (real, imaginary) results."""
    dt = re.dtype.np
    if inverse and onesided:  # the one-sided spectrum of a real signal -> the signal
        m = length // 2 + 1
        k, t = np.arange(m)[:, None], np.arange(length)[None, :]
        twice = np.where((k == 0) | ((length % 2 == 0) & (k == length // 2)), 1.0, 2.0)
        cos = call.const((twice * np.cos(2 * np.pi * k * t / length) / length).astype(dt))
        sin = call.const((twice * np.sin(2 * np.pi * k * t / length) / length).astype(dt))
        y = matmul(_fit(re, m), cos)
        return (y - matmul(_fit(im, m), sin) if im is not None else y), None
    t, k = np.arange(length)[:, None], np.arange(length // 2 + 1 if onesided else length)[None, :]
    angle = 2 * np.pi * t * k / length
    scale = 1.0 / length if inverse else 1.0
    sign = 1.0 if inverse else -1.0
    cos = call.const((np.cos(angle) * scale).astype(dt))
    sin = call.const((sign * np.sin(angle) * scale).astype(dt))
    re = _fit(re, length)
    real, imag = matmul(re, cos), matmul(re, sin)
    if im is not None:
        im = _fit(im, length)
        real, imag = real - matmul(im, sin), imag + matmul(im, cos)
    return real, imag


def _signal(real, imag):
    return real.unsqueeze(-1) if imag is None else S.stack([real, imag], -1)


@op("DFT")
def dft(call, x, dft_length=None, axis=None):
    if call.opset < 20:
        axis = call.attr("axis", 1)
    else:
        axis = int(call.host(axis).item()) if axis is not None else -2
    axis %= x.ndim
    inverse, onesided = bool(call.attr("inverse", 0)), bool(call.attr("onesided", 0))
    n = x.shape[axis]
    length = int(call.host(dft_length).item()) if dft_length is not None else (
        2 * (n - 1) if inverse and onesided else n)
    re, im = (S.movedim(p, axis, -1) if p is not None else None for p in _parts(x))
    real, imag = _transform(call, re, im, length, inverse, onesided)
    real, imag = (S.movedim(p, -1, axis) if p is not None else None for p in (real, imag))
    return _signal(real, imag)


@op("STFT")
def stft(call, x, step, window=None, frame_length=None):
    hop = int(call.host(step).item())
    size = int(call.host(frame_length).item()) if frame_length is not None else window.shape[0]
    frames = 1 + (x.shape[1] - size) // hop
    index = (np.arange(frames)[:, None] * hop + np.arange(size)[None, :]).reshape(-1)
    framed = x[:, call.const(index.astype(np.int64))].reshape(x.shape[0], frames, size, x.shape[-1])
    if window is not None:
        framed = framed * window.reshape(1, 1, size, 1)
    re, im = _parts(framed)
    return _signal(*_transform(call, re, im, size, False, bool(call.attr("onesided", 1))))
