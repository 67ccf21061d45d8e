"""Signal processing: torch.fft's transforms at any length, windows, STFT, FFT convolution and mel
filterbanks, on every device and with gradients.

`ember.signal.fft`, `rfft`, ... are `torch.fft`'s (`n`/`s`, `dim`, `norm`); `stft`/`istft` are
torch's; the windows are `torch.*_window`'s and `torch.signal.windows.gaussian`; `melscale_fbanks` and
`spectrogram` are torchaudio's. All are compositions of the `fft` primitive (docs/signal.md).

Example:
    >>> x = ember.randn(8, 1000)
    >>> X = ember.signal.rfft(x, norm="ortho")
    >>> X.shape, X.dtype, ember.signal.irfft(X, n=1000, norm="ortho").shape
    ((8, 501), c64, (8, 1000))
"""

from .fft import (fft, ifft, rfft, irfft, hfft, ihfft, fft2, ifft2, rfft2, irfft2, fftn, ifftn, rfftn, irfftn,
                  fftfreq, rfftfreq, fftshift, ifftshift)
from .windows import hann_window, hamming_window, blackman_window, bartlett_window, kaiser_window, gaussian
from .spectral import stft, istft, spectrogram, fftconvolve, mel_scale, melscale_fbanks

__all__ = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn",
           "rfftn", "irfftn", "fftfreq", "rfftfreq", "fftshift", "ifftshift", "hann_window", "hamming_window",
           "blackman_window", "bartlett_window", "kaiser_window", "gaussian", "stft", "istft", "spectrogram",
           "fftconvolve", "mel_scale", "melscale_fbanks"]
