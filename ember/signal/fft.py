"""`torch.fft`'s transforms: fft, ifft, rfft, irfft, hfft, ihfft, their 2-d and n-d forms, fftfreq,
rfftfreq, fftshift and ifftshift, with `n`/`s`, `dim` and `norm` as in torch.fft.

Every transform is one of two primitives (`ember.ops.fft`: `fft`, the unscaled complex DFT over some
dims, of any length; `rfft`, the half spectrum of a real signal along one dim) composed with ember ops:
zero padding or trimming to `n`, the scale of `norm` ("backward": none forward and 1/n inverse;
"ortho": 1/sqrt(n) both ways; "forward": 1/n forward), the real input's conversion and the Hermitian
completion of a half spectrum (irfft). Gradients follow from the primitives' rules (the adjoint of a
DFT is a DFT) and those of the ops around it.

Example:
    >>> x = ember.tensor([1.0, 2.0, 0.0, -1.0])
    >>> ember.signal.rfft(x).tolist()
    [(2+0j), (1-3j), (0+0j)]
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..api._common import apply
from ..api.complex import conj, real
from ..api.creation import tensor
from ..api.shape import cat, roll
from ..dtype import complex_of, default_float, dtype_of, real_of
from ..errors import DTypeError, ShapeError
from ..ops.primitive import normalize_dim
from ..tensor import Tensor

NORMS = ("backward", "ortho", "forward")


def _scale(op: str, norm: str | None, n: int, inverse: bool) -> float:
    norm = "backward" if norm is None else norm
    if norm not in NORMS:
        raise ValueError(f"{op}: norm must be one of {NORMS} or None, got {norm!r}")
    if norm == "ortho":
        return 1.0 / math.sqrt(n)
    return 1.0 / n if (norm == "forward") != inverse else 1.0


def _dual(norm: str | None) -> str:
    """The norm of the opposite direction that scales the same (hfft is an irfft of the other norm)."""
    return {"backward": "forward", "forward": "backward", "ortho": "ortho"}["backward" if norm is None else norm]


def _as_complex(op: str, x: Tensor) -> Tensor:
    if x.dtype.is_complex:
        return x
    if x.dtype.name in ("f16", "bf16"):
        raise DTypeError(f"{op}: {x.dtype} transforms are not supported (cast to f32 first)")
    return x.cast(complex_of(x.dtype if x.dtype.is_float else default_float(), op))


def _as_real(op: str, x: Tensor) -> Tensor:
    if x.dtype.is_complex:
        raise DTypeError(f"{op}: expects a real tensor, got {x.dtype}")
    if x.dtype.name in ("f16", "bf16"):
        raise DTypeError(f"{op}: {x.dtype} transforms are not supported (cast to f32 first)")
    return x if x.dtype.is_float else x.cast(default_float())


def _resized(op: str, x: Tensor, n: int, dim: int) -> Tensor:
    """`x` zero-padded or trimmed to length `n` along `dim`."""
    if n < 1:
        raise ShapeError(op, f"invalid number of data points ({n}) specified")
    have = x.shape[dim]
    if have == n:
        return x
    if have > n:
        return x.narrow(dim, 0, n)
    zeros = x.new_zeros(x.shape[:dim] + (n - have,) + x.shape[dim + 1:])
    return cat([x, zeros], dim)


def _dims_and_sizes(op: str, x: Tensor, s, dim, default_all: bool = True) -> tuple[tuple[int, ...], list[int]]:
    """The transformed dims (normalized) and their signal sizes, as torch.fft.fftn reads `s` and `dim`."""
    if dim is None:
        dims = tuple(range(x.ndim - len(s), x.ndim)) if s is not None else tuple(range(x.ndim))
    else:
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
        dims = tuple(normalize_dim(op, d, x.ndim) for d in dims)
        if len(set(dims)) != len(dims):
            raise ShapeError(op, f"dims {tuple(dim)} name a dimension twice")
    if s is not None and len(s) != len(dims):
        raise ShapeError(op, f"s {tuple(s)} and dim {dims} must have the same length")
    if x.ndim == 0 and dims:
        raise ShapeError(op, "expects a tensor of at least 1 dimension")
    sizes = list(s) if s is not None else [x.shape[d] for d in dims]
    sizes = [x.shape[d] if n == -1 else n for n, d in zip(sizes, dims)]
    return dims, sizes


def _c2c(op: str, x: Tensor, s, dim, norm, inverse: bool) -> Tensor:
    x = _as_complex(op, x)
    dims, sizes = _dims_and_sizes(op, x, s, dim)
    for d, n in zip(dims, sizes):
        x = _resized(op, x, n, d)
    out = apply("fft", x, dims=dims, inverse=inverse)
    scale = _scale(op, norm, math.prod(sizes), inverse)
    return out if scale == 1.0 else out * scale


def _r2c(op: str, x: Tensor, s, dim, norm) -> Tensor:
    x = _as_real(op, x)
    dims, sizes = _dims_and_sizes(op, x, s, dim)
    for d, n in zip(dims, sizes):
        x = _resized(op, x, n, d)
    out = apply("rfft", x, dim=dims[-1])  # the half spectrum along the last dim, then the others in full
    if len(dims) > 1:
        out = apply("fft", out, dims=dims[:-1], inverse=False)
    scale = _scale(op, norm, math.prod(sizes), False)
    return out if scale == 1.0 else out * scale


def _c2r(op: str, x: Tensor, s, dim, norm) -> Tensor:
    x = _as_complex(op, x)
    dims, sizes = _dims_and_sizes(op, x, s, dim)
    last = dims[-1]
    if s is None or s[-1] == -1:
        sizes[-1] = 2 * (x.shape[last] - 1)
    n = sizes[-1]
    if n < 1:
        raise ShapeError(op, f"invalid number of data points ({n}) specified")
    for d, m in zip(dims[:-1], sizes[:-1]):
        x = _resized(op, x, m, d)
    half = _resized(op, x, n // 2 + 1, last)
    if len(dims) > 1:  # the other dims first: their inverse keeps the last dim's Hermitian symmetry
        half = apply("fft", half, dims=dims[:-1], inverse=True)
    # The full spectrum: X[k] for k <= n // 2, conj(X[n - k]) above (bins 1 .. (n - 1) // 2, reversed)
    upper = (n - 1) // 2
    if upper:
        full = cat([half, conj(half.narrow(last, 1, upper).flip(last))], last)
    else:
        full = half
    out = real(apply("fft", full, dims=(last,), inverse=True))
    scale = _scale(op, norm, math.prod(sizes), True)
    return out if scale == 1.0 else out * scale


def fft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:  # noqa: A002
    """The 1-d DFT along `dim` (zero-padded or trimmed to `n`)."""
    return _c2c("fft", input, None if n is None else (n,), dim, norm, False)


def ifft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:  # noqa: A002
    """The 1-d inverse DFT along `dim`."""
    return _c2c("ifft", input, None if n is None else (n,), dim, norm, True)


def rfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:  # noqa: A002
    """The DFT of a real signal: its n // 2 + 1 non-negative frequencies."""
    return _r2c("rfft", input, None if n is None else (n,), dim, norm)


def irfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:  # noqa: A002
    """The real signal of length `n` (default 2 * (m - 1)) whose rfft is `input`."""
    return _c2r("irfft", input, None if n is None else (n,), dim, norm)


def hfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:  # noqa: A002
    """The DFT of a Hermitian-symmetric signal given by its first half: a real spectrum."""
    return _c2r("hfft", conj(_as_complex("hfft", input)), None if n is None else (n,), dim, _dual(norm))


def ihfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:  # noqa: A002
    """The inverse of hfft: the half spectrum of a real signal, conjugated."""
    return conj(_r2c("ihfft", input, None if n is None else (n,), dim, _dual(norm)))


def fft2(input: Tensor, s=None, dim=(-2, -1), norm: str | None = None) -> Tensor:  # noqa: A002
    """The 2-d DFT over `dim`."""
    return _c2c("fft2", input, s, dim, norm, False)


def ifft2(input: Tensor, s=None, dim=(-2, -1), norm: str | None = None) -> Tensor:  # noqa: A002
    """The 2-d inverse DFT over `dim`."""
    return _c2c("ifft2", input, s, dim, norm, True)


def rfft2(input: Tensor, s=None, dim=(-2, -1), norm: str | None = None) -> Tensor:  # noqa: A002
    """The 2-d DFT of a real signal (half spectrum along the last of `dim`)."""
    return _r2c("rfft2", input, s, dim, norm)


def irfft2(input: Tensor, s=None, dim=(-2, -1), norm: str | None = None) -> Tensor:  # noqa: A002
    """The inverse of rfft2."""
    return _c2r("irfft2", input, s, dim, norm)


def fftn(input: Tensor, s=None, dim=None, norm: str | None = None) -> Tensor:  # noqa: A002
    """The n-d DFT over `dim` (default: the last len(s) dims, or all)."""
    return _c2c("fftn", input, s, dim, norm, False)


def ifftn(input: Tensor, s=None, dim=None, norm: str | None = None) -> Tensor:  # noqa: A002
    """The n-d inverse DFT."""
    return _c2c("ifftn", input, s, dim, norm, True)


def rfftn(input: Tensor, s=None, dim=None, norm: str | None = None) -> Tensor:  # noqa: A002
    """The n-d DFT of a real signal (half spectrum along the last transformed dim)."""
    return _r2c("rfftn", input, s, dim, norm)


def irfftn(input: Tensor, s=None, dim=None, norm: str | None = None) -> Tensor:  # noqa: A002
    """The inverse of rfftn."""
    return _c2r("irfftn", input, s, dim, norm)


def _freqs(values: np.ndarray, d: float, dtype, device) -> Tensor:
    dtype = default_float() if dtype is None else dtype_of(dtype)
    return tensor(values / d, dtype=real_of(dtype), device=device)


def fftfreq(n: int, d: float = 1.0, *, dtype=None, device=None) -> Tensor:
    """The sample frequencies of an n-point DFT: [0, 1, ..., -1] / (d n)."""
    return _freqs(np.fft.fftfreq(n), d, dtype, device)


def rfftfreq(n: int, d: float = 1.0, *, dtype=None, device=None) -> Tensor:
    """The sample frequencies of an n-point rfft: [0, 1, ..., n // 2] / (d n)."""
    return _freqs(np.fft.rfftfreq(n), d, dtype, device)


def _shift(op: str, x: Tensor, dim, sign: int) -> Tensor:
    dims = tuple(range(x.ndim)) if dim is None else (dim,) if isinstance(dim, int) else tuple(dim)
    dims = tuple(normalize_dim(op, d, x.ndim) for d in dims)
    if not dims:
        return x
    return roll(x, tuple(sign * (x.shape[d] // 2) for d in dims), dims)


def fftshift(input: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:  # noqa: A002
    """The zero frequency moved to the middle (a roll by n // 2 along each dim)."""
    return _shift("fftshift", input, dim, 1)


def ifftshift(input: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:  # noqa: A002
    """The inverse of fftshift (a roll by -(n // 2))."""
    return _shift("ifftshift", input, dim, -1)


__all__ = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn",
           "rfftn", "irfftn", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]
