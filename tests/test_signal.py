"""ember.signal against torch.fft / torch / NumPy on every suite device: transforms at lengths 1, primes
and powers of two, batched, every norm, with gradients; windows, stft/istft, fftconvolve, mel filters."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
from ember import signal
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
