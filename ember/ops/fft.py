"""The DFT primitives: `fft`, the unnormalized discrete Fourier transform of a complex tensor over `dims`,
and `rfft`, the non-negative frequencies of the DFT of a real tensor along one dim.

`fft(x, dims=(d, ...), inverse=False)` is X[k] = sum_m x[m] exp(-2 pi i k m / n) along each dim in
`dims` (`inverse=True`: the sign +, still unscaled), of any length (every size >= 1); the output has
the input's shape and dtype (c64 or c128). `rfft(x, dim=d)` takes an f32 or f64 tensor and gives bins
0 .. n // 2 of its DFT along d (c64 or c128), which the Cube backend computes as a half-length complex
DFT. Normalization, padding, the other real transforms and Hermitian symmetry are compositions in
`ember.signal`. The NumPy references are `numpy.fft`. The rules: the adjoint of a DFT is the DFT of the
opposite sign, so fft's cotangent is `fft(g, dims, not inverse)`, and rfft's is the real part of the
inverse DFT of its cotangent zero-padded to n (PyTorch's convention for complex values, docs/complex.md).

Example:
    >>> registry["fft"].infer(Aval((4, 7), c64), dims=(1,), inverse=False)
    Aval(shape=(4, 7), dtype=c64)
    >>> registry["rfft"].infer(Aval((4, 7), f32), dim=1)
    Aval(shape=(4, 4), dtype=c64)
"""

from __future__ import annotations

import numpy as np

from ..dtype import complex_of
from ..errors import DTypeError, ShapeError
from .primitive import Aval, primitive, saves_none
from .spatial import call


def _check_dim(op: str, x: Aval, d: int) -> None:
    if not 0 <= d < len(x.shape):
        raise ShapeError(op, f"dim {d} is out of range for shape {x.shape}")
    if x.shape[d] == 0:
        raise ShapeError(op, f"invalid number of data points (0) along dim {d} of shape {x.shape}")


def _fft_infer(x: Aval, *, dims: tuple[int, ...], inverse: bool) -> Aval:
    if not x.dtype.is_complex:
        raise DTypeError(f"fft: the primitive takes complex tensors (ember.signal converts real ones), got {x.dtype}")
    for d in dims:
        _check_dim("fft", x, d)
    return x


def _fft_vjp(ctx, g):
    return (call("fft", g, dims=ctx.params["dims"], inverse=not ctx.params["inverse"]),)


def _fft_reference(x: np.ndarray, *, dims: tuple[int, ...], inverse: bool) -> np.ndarray:
    if not dims:
        return x.copy()
    out = np.fft.ifftn(x, axes=dims, norm="forward") if inverse else np.fft.fftn(x, axes=dims)
    return out.astype(x.dtype, copy=False)


primitive("fft", infer=_fft_infer, vjp=_fft_vjp, cost="compute", saves=saves_none, complex_rule=True)(_fft_reference)


def _rfft_infer(x: Aval, *, dim: int) -> Aval:
    if x.dtype.name not in ("f32", "f64"):
        raise DTypeError(f"rfft: the primitive takes f32 or f64 tensors (ember.signal converts others), got {x.dtype}")
    _check_dim("rfft", x, dim)
    return Aval(x.shape[:dim] + (x.shape[dim] // 2 + 1,) + x.shape[dim + 1:], complex_of(x.dtype, "rfft"))


def _rfft_vjp(ctx, g):
    dim = ctx.params["dim"]
    (shape, _), = ctx.input_avals
    pads = tuple((0, shape[dim] - g.shape[dim]) if d == dim else (0, 0) for d in range(len(shape)))
    full = call("pad", g, pads=pads, value=0)
    return (call("real", call("fft", full, dims=(dim,), inverse=True)),)


def _rfft_reference(x: np.ndarray, *, dim: int) -> np.ndarray:
    return np.fft.rfft(x, axis=dim).astype(np.result_type(x.dtype, np.complex64), copy=False)


primitive("rfft", infer=_rfft_infer, vjp=_rfft_vjp, cost="compute", saves=saves_none, complex_rule=True)(_rfft_reference)
