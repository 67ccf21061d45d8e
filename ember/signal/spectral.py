"""Short-time transforms and what is built on them: `stft` and `istft` (torch.stft / torch.istft
semantics: center, pad_mode, window, normalized, onesided, return_complex, length), `spectrogram`
(torchaudio's `power`), `fftconvolve` (scipy's `fftconvolve`, modes full/same/valid), `mel_scale`
and `melscale_fbanks` (torchaudio's "htk" and "slaney" scales and norms).

Frames are an index of the (padded) signal; the overlap-add of istft is an `index_add`; so gradients
flow through every function to the signal and the window.

Example:
    >>> x = ember.randn(2, 400)
    >>> S = ember.signal.stft(x, 64, window=ember.signal.hann_window(64), return_complex=True)
    >>> S.shape, ember.signal.istft(S, 64, window=ember.signal.hann_window(64), length=400).shape
    ((2, 33, 26), (2, 400))
"""

from __future__ import annotations

import math

import numpy as np

from ..api.complex import view_as_real
from ..api.creation import from_numpy, ones, tensor, zeros
from ..api.shape import pad
from ..errors import ShapeError
from ..tensor import Tensor
from .fft import fft, ifft, irfft, rfft, irfftn, rfftn


def _window_of(op: str, window: Tensor | None, win_length: int, n_fft: int, like: Tensor) -> Tensor:
    if window is None:
        window = ones(win_length, dtype=like.dtype if like.dtype.is_float else None, device=like.device.inner)
    if window.ndim != 1 or window.shape[0] != win_length:
        raise ShapeError(op, f"window must be 1-d of win_length {win_length}, got shape {window.shape}")
    if win_length > n_fft or win_length < 1:
        raise ShapeError(op, f"win_length {win_length} must be in 1 .. n_fft ({n_fft})")
    left = (n_fft - win_length) // 2
    return pad(window, (left, n_fft - win_length - left)) if win_length < n_fft else window


def _frame_index(frames: int, n_fft: int, hop: int, device) -> Tensor:
    positions = np.arange(frames)[:, None] * hop + np.arange(n_fft)[None, :]
    return from_numpy(positions.reshape(-1).astype(np.int64), device)


def stft(input: Tensor, n_fft: int, hop_length: int | None = None, win_length: int | None = None,  # noqa: A002
         window: Tensor | None = None, center: bool = True, pad_mode: str = "reflect", normalized: bool = False,
         onesided: bool | None = None, return_complex: bool | None = None) -> Tensor:
    """The short-time Fourier transform of (B?, L) signals: (B?, n_freq, frames) (torch.stft)."""
    hop = n_fft // 4 if hop_length is None else hop_length
    win_length = n_fft if win_length is None else win_length
    if input.ndim not in (1, 2):
        raise ShapeError("stft", f"expects a 1-d or 2-d signal, got shape {input.shape}")
    if hop <= 0 or n_fft <= 0:
        raise ShapeError("stft", f"n_fft ({n_fft}) and hop_length ({hop}) must be positive")
    if return_complex is None and not input.dtype.is_complex:
        raise ValueError("stft: return_complex must be given for real inputs (as torch.stft requires); "
                         "return_complex=True is recommended")
    batched = input.ndim == 2
    x = input if batched else input.reshape(1, -1)
    if center:
        half = n_fft // 2
        x = pad(x.reshape(x.shape[0], 1, -1), (half, half), mode=pad_mode).reshape(x.shape[0], -1)
    length = x.shape[-1]
    if length < n_fft:
        raise ShapeError("stft", f"n_fft ({n_fft}) exceeds the (padded) signal length {length}")
    frames = 1 + (length - n_fft) // hop
    w = _window_of("stft", window, win_length, n_fft, input)
    framed = x.index_select(1, _frame_index(frames, n_fft, hop, x.device)).reshape(x.shape[0], frames, n_fft) * w
    complex_in = input.dtype.is_complex or w.dtype.is_complex
    onesided = not complex_in if onesided is None else onesided
    if onesided and complex_in:
        raise ValueError("stft: onesided=True needs a real signal and window")
    spec = rfft(framed, dim=-1) if onesided else fft(framed, dim=-1)
    if normalized:
        spec = spec * (1.0 / math.sqrt(n_fft))
    spec = spec.transpose(1, 2)
    spec = spec if batched else spec.reshape(spec.shape[1:])
    return spec if return_complex or return_complex is None else view_as_real(spec)


def istft(input: Tensor, n_fft: int, hop_length: int | None = None, win_length: int | None = None,  # noqa: A002
          window: Tensor | None = None, center: bool = True, normalized: bool = False,
          onesided: bool | None = None, length: int | None = None, return_complex: bool = False) -> Tensor:
    """The inverse of stft by weighted overlap-add (torch.istft); (B?, n_freq, frames) -> (B?, length)."""
    hop = n_fft // 4 if hop_length is None else hop_length
    win_length = n_fft if win_length is None else win_length
    if not input.dtype.is_complex:
        raise ShapeError("istft", f"expects a complex spectrum, got {input.dtype}")
    batched = input.ndim == 3
    spec = input if batched else input.reshape((1,) + input.shape)
    if spec.ndim != 3:
        raise ShapeError("istft", f"expects a 2-d or 3-d spectrum, got shape {input.shape}")
    onesided = spec.shape[1] != n_fft if onesided is None else onesided
    want = n_fft // 2 + 1 if onesided else n_fft
    if spec.shape[1] != want:
        raise ShapeError("istft", f"{spec.shape[1]} frequencies, expected {want} for n_fft {n_fft}")
    frames = spec.shape[2]
    spec = spec.transpose(1, 2)
    if normalized:
        spec = spec * math.sqrt(n_fft)
    if onesided:
        if return_complex:
            raise ValueError("istft: return_complex=True needs a two-sided spectrum (onesided=False)")
        chunks = irfft(spec, n=n_fft, dim=-1)
    else:
        chunks = ifft(spec, n=n_fft, dim=-1)
        chunks = chunks if return_complex else chunks.real
    w = _window_of("istft", window, win_length, n_fft, chunks.real if chunks.dtype.is_complex else chunks)
    if not w.dtype.is_complex and chunks.dtype.is_complex:
        w = w.cast(chunks.dtype)
    chunks = chunks * w
    total = n_fft + hop * (frames - 1)
    index = _frame_index(frames, n_fft, hop, chunks.device)
    signal = zeros(spec.shape[0], total, dtype=chunks.dtype, device=chunks.device.inner)
    signal = signal.index_add(1, index, chunks.reshape(spec.shape[0], -1))
    w2 = (w.abs() ** 2 if w.dtype.is_complex else w * w).reshape(1, n_fft).expand(frames, n_fft).reshape(-1)
    envelope = zeros(total, dtype=w2.dtype, device=w2.device.inner).index_add(0, index.to(w2.device.inner), w2)
    start = n_fft // 2 if center else 0
    end = start + length if length is not None else (total - n_fft // 2 if center else total)
    end_in = min(end, total)
    env = envelope[start:end_in]
    if env.numel and float(env.abs().amin().item()) < 1e-11:
        raise ValueError("istft: window overlap-add is zero somewhere (the NOLA condition fails)")
    y = signal[:, start:end_in] / (env.cast(signal.dtype) if signal.dtype.is_complex else env)
    if end > end_in:
        y = pad(y, (0, end - end_in))
    return y if batched else y.reshape(y.shape[1:])


def spectrogram(input: Tensor, n_fft: int = 400, hop_length: int | None = None,  # noqa: A002
                win_length: int | None = None, window: Tensor | None = None, power: float | None = 2.0,
                normalized: bool = False, center: bool = True, pad_mode: str = "reflect") -> Tensor:
    """|stft|^power (torchaudio.functional.spectrogram's `power`; None: the complex spectrum)."""
    spec = stft(input, n_fft, hop_length, win_length, window, center, pad_mode, normalized, True, True)
    if power is None:
        return spec
    return spec.abs() if power == 1.0 else spec.abs() ** power


def fftconvolve(in1: Tensor, in2: Tensor, mode: str = "full", dim=None) -> Tensor:
    """The convolution of `in1` and `in2` over `dim` (default: all dims) by FFT (scipy.signal.fftconvolve):
    `full` (every overlap), `same` (centered, the size of in1) or `valid` (full overlaps only)."""
    if mode not in ("full", "same", "valid"):
        raise ValueError(f"fftconvolve: mode must be full, same or valid, got {mode!r}")
    if in1.ndim != in2.ndim:
        raise ShapeError("fftconvolve", f"inputs need the same number of dims, got {in1.shape} and {in2.shape}")
    dims = tuple(range(in1.ndim)) if dim is None else (dim,) if isinstance(dim, int) else tuple(dim)
    dims = tuple(d % in1.ndim for d in dims)
    sizes = [in1.shape[d] + in2.shape[d] - 1 for d in dims]
    if any(in1.shape[d] == 0 or in2.shape[d] == 0 for d in dims):
        raise ShapeError("fftconvolve", f"empty inputs {in1.shape} and {in2.shape}")
    if in1.dtype.is_complex or in2.dtype.is_complex:
        from .fft import fftn, ifftn
        out = ifftn(fftn(in1, s=sizes, dim=dims) * fftn(in2, s=sizes, dim=dims), dim=dims)
    else:
        out = irfftn(rfftn(in1, s=sizes, dim=dims) * rfftn(in2, s=sizes, dim=dims), s=sizes, dim=dims)
    for d, full in zip(dims, sizes):
        a, b = in1.shape[d], in2.shape[d]
        if mode == "same":
            start, size = (full - a) // 2, a
        elif mode == "valid":
            start, size = min(a, b) - 1, max(a, b) - min(a, b) + 1
        else:
            continue
        out = out.narrow(d, start, size)
    return out


def _hz_to_mel(f, scale: str):
    f = np.asarray(f, np.float64)
    if scale == "htk":
        return 2595.0 * np.log10(1.0 + f / 700.0)
    # slaney: linear below 1 kHz, logarithmic above
    mel = 3.0 * f / 200.0
    log_part = 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (math.log(6.4) / 27.0)
    return np.where(f >= 1000.0, log_part, mel)


def _mel_to_hz(m, scale: str):
    m = np.asarray(m, np.float64)
    if scale == "htk":
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    hz = 200.0 * m / 3.0
    return np.where(m >= 15.0, 1000.0 * np.exp((math.log(6.4) / 27.0) * (m - 15.0)), hz)


def mel_scale(freq, mel_scale: str = "htk", inverse: bool = False) -> np.ndarray:
    """Hz to mels (`inverse`: mels to Hz) on the "htk" or "slaney" scale, as NumPy values."""
    if mel_scale not in ("htk", "slaney"):
        raise ValueError(f"mel_scale must be 'htk' or 'slaney', got {mel_scale!r}")
    return _mel_to_hz(freq, mel_scale) if inverse else _hz_to_mel(freq, mel_scale)


def melscale_fbanks(n_freqs: int, f_min: float, f_max: float, n_mels: int, sample_rate: int,
                    norm: str | None = None, mel_scale: str = "htk", *, dtype=None, device=None) -> Tensor:
    """Triangular mel filters, (n_freqs, n_mels) (torchaudio.functional.melscale_fbanks): `spec.T @ fb`
    maps a spectrogram's frequencies to mel bands; `norm="slaney"` scales each band to unit area."""
    if norm not in (None, "slaney"):
        raise ValueError(f"melscale_fbanks: norm must be None or 'slaney', got {norm!r}")
    if mel_scale not in ("htk", "slaney"):
        raise ValueError(f"melscale_fbanks: mel_scale must be 'htk' or 'slaney', got {mel_scale!r}")
    all_freqs = np.linspace(0, sample_rate // 2, n_freqs)
    m_pts = np.linspace(_hz_to_mel(f_min, mel_scale), _hz_to_mel(f_max, mel_scale), n_mels + 2)
    f_pts = _mel_to_hz(m_pts, mel_scale)
    f_diff = f_pts[1:] - f_pts[:-1]
    slopes = f_pts[None, :] - all_freqs[:, None]
    down = -slopes[:, :-2] / f_diff[:-1]
    up = slopes[:, 2:] / f_diff[1:]
    fb = np.maximum(0.0, np.minimum(down, up))
    if norm == "slaney":
        fb = fb * (2.0 / (f_pts[2:n_mels + 2] - f_pts[:n_mels]))[None, :]
    return tensor(fb, dtype=dtype or "f32", device=device)


__all__ = ["stft", "istft", "spectrogram", "fftconvolve", "mel_scale", "melscale_fbanks"]
