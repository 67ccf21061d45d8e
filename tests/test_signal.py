"""ember.signal against torch.fft / torch / NumPy on every suite device: transforms at lengths 1, primes
and powers of two, batched, every norm, with gradients; the DFT kernels (ember/kernels/fft.py) at every
kind of length; windows, stft/istft, fftconvolve, mel filters."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

import ember
from ember import signal
from ember.kernels.fft_plan import bluestein_length, magic, radices
from conformance.oracle import check, check_grad, sample, to_numpy, to_torch

NORMS = (None, "ortho", "forward")
TOL = {"f32": (2e-4, 2e-5), "c64": (2e-4, 2e-5)}


def _tol(dtype):
    return TOL.get(dtype)


@pytest.mark.parametrize("n", [1, 7, 13, 16, 97])
def test_1d_transforms(device, n, rng):
    real = sample((3, n), "f64", rng)
    cplx = sample((3, n), "c128", rng)
    for name, data in (("fft", cplx), ("ifft", cplx), ("fft", real), ("rfft", real), ("ihfft", real),
                       ("irfft", cplx), ("hfft", cplx)):
        for norm in NORMS:
            for extra in ({}, {"n": n + 3}, {"n": max(n - 2, 1)}):
                try:
                    want = getattr(torch.fft, name)(to_torch(data), norm=norm, **extra)
                except RuntimeError:  # irfft of one bin gives 0 points: an error in both
                    with pytest.raises(ember.ShapeError, match="data points"):
                        getattr(signal, name)(ember.tensor(data, device=device), norm=norm, **extra)
                    continue
                check(getattr(signal, name)(ember.tensor(data, device=device), norm=norm, **extra), want)


@pytest.mark.parametrize("dtype", ["f32", "c64"])
def test_nd_transforms_and_dims(device, dtype, rng):
    x = sample((2, 5, 6), dtype, rng)
    real = sample((2, 5, 6), "f32", rng)
    e, t = ember.tensor(x, device=device), to_torch(x)
    er, tr = ember.tensor(real, device=device), to_torch(real)
    cases = [(signal.fft(e, dim=1), torch.fft.fft(t, dim=1)), (signal.fft2(e), torch.fft.fft2(t)),
             (signal.ifft2(e, s=(4, 7)), torch.fft.ifft2(t, s=(4, 7))),
             (signal.fftn(e, dim=(0, 2), norm="ortho"), torch.fft.fftn(t, dim=(0, 2), norm="ortho")),
             (signal.ifftn(e), torch.fft.ifftn(t)), (signal.rfft2(er), torch.fft.rfft2(tr)),
             (signal.rfftn(er, s=(3, 8)), torch.fft.rfftn(tr, s=(3, 8))),
             (signal.irfft2(signal.rfft2(er), s=(5, 6)), torch.fft.irfft2(torch.fft.rfft2(tr), s=(5, 6))),
             (signal.irfftn(e if dtype == "c64" else signal.rfftn(er), dim=(0, 1), norm="forward"),
              torch.fft.irfftn(t if dtype == "c64" else torch.fft.rfftn(tr), dim=(0, 1), norm="forward")),
             (signal.fftshift(er), torch.fft.fftshift(tr)), (signal.ifftshift(er, dim=(1, 2)), torch.fft.ifftshift(tr, dim=(1, 2))),
             (signal.fftfreq(7, 0.5, device=device), torch.fft.fftfreq(7, 0.5)),
             (signal.rfftfreq(8, device=device), torch.fft.rfftfreq(8))]
    for got, want in cases:
        check(got, want, tol=_tol(dtype))


def test_empty_and_bad_lengths(device):
    with pytest.raises(ember.ShapeError, match="data points"):
        signal.fft(ember.zeros(3, 0, device=device))
    with pytest.raises(ember.ShapeError, match="data points"):
        signal.rfft(ember.zeros(4, device=device), n=0)
    # an empty batch transforms to an empty batch (NumPy's; torch's MKL refuses it)
    empty = signal.rfft(ember.zeros(0, 5, device=device))
    assert empty.shape == np.fft.rfft(np.zeros((0, 5))).shape and empty.dtype == ember.c64
    for n in (6, 7):
        assert signal.ifft(ember.zeros(0, n, dtype="c64", device=device)).shape == (0, n)
        assert signal.rfft(ember.zeros(2, 0, n, device=device), dim=1, n=4).shape == (2, 3, n)


# ---- the DFT kernels at every kind of length ------------------------------------------------------------
EPS = {"c64": 2.0 ** -24, "c128": 2.0 ** -53}
# 1 and 2; primes (those above 7 through Bluestein); smooth composites; 202 = 2 * 101 and 2018 = 2 * 1009
# (a large prime factor: Bluestein); every power of two to 2^12
LENGTHS = [1, 2, 7, 17, 97, 1009, 12, 360, 1000, 202] + [2 ** k for k in range(2, 13)]
# rows * n >= 2^16: on the C target every pass of a row runs in one cube (rows_kernel), plain and Bluestein
BATCHED = [(64, 1024), (70, 1009)]


def _close(got: ember.Tensor, want: torch.Tensor, dtype: str, n: int) -> None:
    """max |got - want| <= 8 eps log2(n) max |want|: an FFT's rounding grows with its passes."""
    assert got.dtype.name == dtype and got.shape == tuple(want.shape)
    g, w = got.numpy().astype(np.complex128), want.resolve_conj().numpy()
    err = np.abs(g - w).max(initial=0) / max(np.abs(w).max(initial=0), 1e-300)
    assert err <= 8 * EPS[dtype] * max(1.0, math.log2(n)), f"n = {n}: relative error {err:.2e}"


def _no_fallback(device) -> None:
    """The transforms ran as cube kernels: the Cube backend (if the device has one) recorded no fallback."""
    backend = device.backend
    while backend is not None and not hasattr(backend, "fallbacks"):
        backend = getattr(backend, "inner", None)
    if backend is not None and type(backend).__name__ == "CubeBackend":
        assert not {"fft", "rfft"} & backend.fallbacks


@pytest.mark.parametrize("dtype", ["c64", "c128"])
def test_fft_kernels_at_any_length(device, dtype, rng):
    """Forward and inverse DFTs against torch.fft in double precision, rows of every kind of length."""
    for rows, n in [(3, n) for n in LENGTHS] + BATCHED:
        x = sample((rows, n), dtype, rng)
        e, t = ember.tensor(x, device=device), to_torch(x.astype(np.complex128))
        _close(signal.fft(e), torch.fft.fft(t), dtype, n)
        _close(signal.ifft(e, norm="forward"), torch.fft.ifft(t, norm="forward"), dtype, n)
    x = sample((5, 6, 7), dtype, rng)  # over leading dims (moved last and back) and several at once
    e, t = ember.tensor(x, device=device), to_torch(x.astype(np.complex128))
    _close(signal.fft(e, dim=0), torch.fft.fft(t, dim=0), dtype, 5)
    _close(signal.ifftn(e, dim=(0, 2), norm="forward"), torch.fft.ifftn(t, dim=(0, 2), norm="forward"), dtype, 35)
    _close(signal.fft(e.transpose(0, 2), dim=1), torch.fft.fft(t.transpose(0, 2), dim=1), dtype, 6)
    _no_fallback(device)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_rfft_kernels(device, dtype, rng):
    """rfft of even lengths is a half-length complex DFT and a post-twiddle; odd lengths take the full one."""
    cdtype = {"f32": "c64", "f64": "c128"}[dtype]
    for n in [1, 2, 3, 8, 17, 98, 1000, 2018, 4096]:
        x = sample((3, n), dtype, rng)
        _close(signal.rfft(ember.tensor(x, device=device)), torch.fft.rfft(to_torch(x.astype(np.float64))), cdtype, n)
    x = sample((6, 5, 8), dtype, rng)
    e, t = ember.tensor(x, device=device), to_torch(x.astype(np.float64))
    _close(signal.rfft(e, dim=0), torch.fft.rfft(t, dim=0), cdtype, 6)
    _close(signal.rfftn(e, dim=(0, 1)), torch.fft.rfftn(t, dim=(0, 1)), cdtype, 30)
    _no_fallback(device)


def test_fft_plans():
    """The passes multiply to the length (none for a large prime factor); Bluestein's length is 7-smooth
    and long enough for the circular convolution; the multiply-high division is exact on edge values."""
    for n in list(range(1, 400)) + [1009, 4096, 1048576, 1048573]:
        rs = radices(n)
        smooth = all(p in (2, 3, 5, 7) for p in _prime_factors(n))
        assert (rs is not None) == smooth and (rs is None or math.prod(rs) == n)
        if rs is None:
            m = bluestein_length(n)
            assert m >= 2 * n - 1 and radices(m) is not None
    assert radices(1024) == (16, 8, 8) and bluestein_length(1048573) == 2 ** 21
    pick = random.Random(0)
    for d in [1, 2, 3, 7, 16, 1000, 65537, 2 ** 30 + 3, 2 ** 31 - 1]:
        mg, s1, s2 = magic(d)
        for x in [0, 1, d - 1, d, d + 1, 2 ** 31 - 1] + [pick.randrange(2 ** 31) for _ in range(200)]:
            t = (x * mg) >> 32
            assert (t + ((x - t) >> s1)) >> s2 == x // d


def _prime_factors(n: int) -> set:
    found, p = set(), 2
    while p * p <= n:
        while n % p == 0:
            found.add(p)
            n //= p
        p += 1
    return found | ({n} if n > 1 else set())


def _grads(fn, arrays, device):
    leaves = [ember.tensor(a, device=device.autodiff()).require_grad() for a in arrays]
    grads = fn(signal, ember, *leaves).backward()
    tl = [to_torch(a).requires_grad_(True) for a in arrays]
    fn(torch.fft, torch, *tl).backward()
    return [(e.grad(grads), t.grad) for e, t in zip(leaves, tl)]


LOSSES = [
    lambda f, m, x, z: f.rfft(x, norm="ortho").abs().sum() + (f.fft(z, n=9) * f.ifft(z, n=9).conj()).real.sum(),
    lambda f, m, x, z: f.irfft(z, n=13).pow(2).sum() + f.hfft(z, n=12, norm="forward").sum(),
    lambda f, m, x, z: f.ihfft(x).angle().sum() + f.irfft(f.rfft(x * 2), n=11).sum(),
    lambda f, m, x, z: f.fft2(m.complex(x, x.flip(-1))).abs().sum() + f.irfftn(z, s=(3, 8)).sum(),
]


@pytest.mark.parametrize("case", range(len(LOSSES)))
def test_gradients_match_torch(device, case, rng):
    x, z = sample((3, 11), "f64", rng), sample((3, 7), "c128", rng)
    for got, want in _grads(LOSSES[case], [x, z], device):
        if got is not None or want is not None:
            check_grad(got, want)


def test_gradient_finite_differences(rng):
    """The DFT's rule checked against central differences in f64 (numpy device)."""
    x0 = sample((13,), "f64", rng)
    w = ember.tensor(sample((7,), "c128", rng), device="numpy")

    def loss(x):
        return (signal.rfft(x) * w).abs().sum() + signal.irfft(signal.rfft(x) * w, n=13).pow(2).sum()

    leaf = ember.tensor(x0, device=ember.Device.numpy().autodiff()).require_grad()
    got = leaf.grad(loss(leaf).backward()).numpy()
    h, want = 1e-6, np.zeros(13)
    for k in range(13):
        up, down = x0.copy(), x0.copy()
        up[k] += h
        down[k] -= h
        want[k] = (loss(ember.tensor(up, device="numpy")).item() - loss(ember.tensor(down, device="numpy")).item()) / (2 * h)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n", [0, 1, 8, 13])
def test_windows(n):
    for name in ("hann_window", "hamming_window", "blackman_window", "bartlett_window"):
        for periodic in (True, False):
            check(getattr(signal, name)(n, periodic, device="numpy"), getattr(torch, name)(n, periodic),
                  tol=(1e-6, 1e-6))
    check(signal.kaiser_window(n, False, beta=5.0, device="numpy"), torch.kaiser_window(n, False, beta=5.0),
          tol=(1e-5, 1e-6))
    check(signal.kaiser_window(n, device="numpy"), torch.kaiser_window(n), tol=(1e-5, 1e-6))
    for sym in (True, False):
        check(signal.gaussian(n, std=2.5, sym=sym, device="numpy"), torch.signal.windows.gaussian(n, std=2.5, sym=sym),
              tol=(1e-6, 1e-6))


@pytest.mark.parametrize("center, pad_mode, normalized, win, kind", [(True, "reflect", False, 32, "hann"),
                                                                     (True, "constant", True, 20, "hann"),
                                                                     (False, "reflect", False, 32, "hamming")])
def test_stft_istft(device, center, pad_mode, normalized, win, kind, rng):
    x = sample((2, 150), "f32", rng)
    window = getattr(signal, f"{kind}_window")(win, device=device)
    twindow = getattr(torch, f"{kind}_window")(win)
    e = signal.stft(ember.tensor(x, device=device), 32, 8, win, window, center, pad_mode, normalized,
                    return_complex=True)
    t = torch.stft(to_torch(x), 32, 8, win, twindow, center, pad_mode, normalized, return_complex=True)
    check(e, t, tol=(2e-4, 2e-5))
    check(signal.stft(ember.tensor(x[0], device=device), 32, 8, win, window, center, pad_mode, normalized,
                      onesided=False, return_complex=False),
          torch.stft(to_torch(x[0]), 32, 8, win, twindow, center, pad_mode, normalized, onesided=False,
                     return_complex=False), tol=(2e-4, 2e-5))
    length = 150 if center else None
    back = signal.istft(e, 32, 8, win, window, center, normalized, length=length)
    check(back, torch.istft(t, 32, 8, win, twindow, center, normalized, length=length), tol=(2e-4, 2e-5))
    if center:
        np.testing.assert_allclose(back.numpy(), x, rtol=1e-4, atol=1e-5)


def test_stft_gradient(device, rng):
    x = sample((90,), "f64", rng)
    e = ember.tensor(x, device=device.autodiff()).require_grad()
    loss = signal.stft(e, 16, 4, window=signal.hann_window(16, dtype="f64", device=device), return_complex=True)
    g = e.grad(loss.abs().sum().backward())
    t = to_torch(x).requires_grad_(True)
    torch.stft(t, 16, 4, window=torch.hann_window(16, dtype=torch.float64), return_complex=True).abs().sum().backward()
    check_grad(g, t.grad)


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_fftconvolve(device, mode, rng):
    a, b = sample((3, 17), "f64", rng), sample((3, 5), "f64", rng)
    got = signal.fftconvolve(ember.tensor(a, device=device), ember.tensor(b, device=device), mode=mode, dim=-1)
    want = np.stack([np.convolve(a[i], b[i], mode=mode) for i in range(3)])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-10)
    a2, b2 = sample((6, 7), "f64", rng), sample((3, 4), "f64", rng)
    full = np.zeros((8, 10))
    for i in range(3):
        for j in range(4):
            full[i:i + 6, j:j + 7] += b2[i, j] * a2
    got2 = signal.fftconvolve(ember.tensor(a2, device=device), ember.tensor(b2, device=device))
    np.testing.assert_allclose(got2.numpy(), full, rtol=1e-10, atol=1e-10)


def _mel_reference(n_freqs, f_min, f_max, n_mels, sr, norm, scale):
    """torchaudio's melscale_fbanks written from its formulas (torchaudio is not installed here)."""
    def hz_to_mel(f):
        if scale == "htk":
            return 2595.0 * np.log10(1.0 + f / 700.0)
        f = np.asarray(f, np.float64)
        return np.where(f < 1000, f / (200 / 3), 15 + np.log(np.maximum(f, 1e-10) / 1000) / (np.log(6.4) / 27))

    def mel_to_hz(m):
        if scale == "htk":
            return 700.0 * (10 ** (m / 2595.0) - 1.0)
        return np.where(m < 15, m * 200 / 3, 1000 * np.exp(np.log(6.4) / 27 * (m - 15)))

    freqs = np.linspace(0, sr // 2, n_freqs)
    f_pts = mel_to_hz(np.linspace(hz_to_mel(f_min), hz_to_mel(f_max), n_mels + 2))
    fb = np.zeros((n_freqs, n_mels))
    for m in range(n_mels):
        lo, mid, hi = f_pts[m], f_pts[m + 1], f_pts[m + 2]
        fb[:, m] = np.clip(np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)), 0, None)
        if norm == "slaney":
            fb[:, m] *= 2.0 / (hi - lo)
    return fb


@pytest.mark.parametrize("scale, norm", [("htk", None), ("slaney", "slaney"), ("htk", "slaney")])
def test_mel_filterbanks_and_spectrogram(device, scale, norm, rng):
    fb = signal.melscale_fbanks(201, 20.0, 7600.0, 23, 16000, norm, scale, dtype="f64", device=device)
    np.testing.assert_allclose(fb.numpy(), _mel_reference(201, 20.0, 7600.0, 23, 16000, norm, scale), rtol=1e-9,
                               atol=1e-12)
    x = sample((2, 900), "f32", rng)
    spec = signal.spectrogram(ember.tensor(x, device=device), 400, 160, window=signal.hann_window(400, device=device))
    want = torch.stft(to_torch(x), 400, 160, window=torch.hann_window(400), return_complex=True).abs() ** 2
    check(spec, want, tol=(1e-3, 1e-3))
    mel = spec.transpose(1, 2) @ fb.cast("f32")
    np.testing.assert_allclose(mel.numpy(), to_numpy(want).transpose(0, 2, 1) @ fb.numpy(), rtol=1e-3, atol=1e-2)
