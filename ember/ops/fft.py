"""The `fft` primitive: the unnormalized discrete Fourier transform of a complex tensor over `dims`.

`fft(x, dims=(d, ...), inverse=False)` is X[k] = sum_m x[m] exp(-2 pi i k m / n) along each dim in
`dims` (`inverse=True`: the sign +, still unscaled), of any length (every size >= 1); the output has
the input's shape and dtype (c64 or c128). Normalization, real transforms, padding and Hermitian
symmetry are compositions in `ember.signal`. The NumPy reference is `numpy.fft`. The rule: the adjoint
of a DFT is the DFT of the opposite sign, so the cotangent is `fft(g, dims, not inverse)` (PyTorch's
convention for complex inputs, docs/complex.md).

Example:
    >>> registry["fft"].infer(Aval((4, 7), c64), dims=(1,), inverse=False)
    Aval(shape=(4, 7), dtype=c64)
"""

from __future__ import annotations

import numpy as np

from ..errors import DTypeError, ShapeError
from .primitive import Aval, primitive, saves_none
from .spatial import call


def _fft_infer(x: Aval, *, dims: tuple[int, ...], inverse: bool) -> Aval:
    if not x.dtype.is_complex:
        raise DTypeError(f"fft: the primitive takes complex tensors (ember.signal converts real ones), got {x.dtype}")
    for d in dims:
        if not 0 <= d < len(x.shape):
            raise ShapeError("fft", f"dim {d} is out of range for shape {x.shape}")
        if x.shape[d] == 0:
            raise ShapeError("fft", f"invalid number of data points (0) along dim {d} of shape {x.shape}")
    return x


def _fft_vjp(ctx, g):
    return (call("fft", g, dims=ctx.params["dims"], inverse=not ctx.params["inverse"]),)


def _fft_reference(x: np.ndarray, *, dims: tuple[int, ...], inverse: bool) -> np.ndarray:
    if not dims:
        return x.copy()
    out = np.fft.ifftn(x, axes=dims, norm="forward") if inverse else np.fft.fftn(x, axes=dims)
    return out.astype(x.dtype, copy=False)


primitive("fft", infer=_fft_infer, vjp=_fft_vjp, cost="compute", saves=saves_none, complex_rule=True)(_fft_reference)
