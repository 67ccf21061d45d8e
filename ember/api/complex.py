"""Complex numbers: PyTorch's `complex`, `polar`, `conj`, `real`, `imag`, `angle`, `sgn`,
`view_as_real`, `view_as_complex` and `is_complex`.

complex64 (`ember.c64`, `ember.complex64`) and complex128 (`c128`) tensors take part in arithmetic,
matmul, reductions, movement and indexing with PyTorch's promotion (`f32 tensor * 1j` is c64, `f64` with
`c64` is c128), and their gradients follow PyTorch's conjugate-Wirtinger convention (docs/complex.md).
`x.real` and `x.imag` are properties, as in PyTorch; `view_as_real` and `view_as_complex` return new
tensors (ember's tensors are values: nothing is shared to write through).

Example:
    >>> z = ember.complex(ember.tensor([1.0, 0.0]), ember.tensor([0.0, 2.0]))
    >>> z.dtype, z.abs().tolist(), ember.view_as_real(z).shape
    (c64, [1.0, 2.0], (2, 2))
"""

from __future__ import annotations

import math

from ..dtype import default_float
from ..errors import DTypeError, ShapeError
from ._common import Tensor, apply
from .shape import stack


def is_complex(x: Tensor) -> bool:
    """Whether `x` holds complex numbers (c64 or c128)."""
    return x.dtype.is_complex


def complex(real: Tensor, imag: Tensor) -> Tensor:  # noqa: A001  (PyTorch's name)
    """The complex tensor `real + i imag` (both f32, or both f64; broadcast)."""
    if not (isinstance(real, Tensor) and isinstance(imag, Tensor)):
        raise TypeError("complex: expects two tensors")
    if real.dtype is not imag.dtype or not real.dtype.is_float:
        raise DTypeError(f"complex: expects real and imag of one float dtype (f32 or f64), got {real.dtype} and "
                         f"{imag.dtype}")
    return apply("complex", real, imag)


def polar(abs: Tensor, angle: Tensor) -> Tensor:  # noqa: A002
    """`abs * (cos(angle) + i sin(angle))`."""
    return complex(abs * angle.cos(), abs * angle.sin())


def conj(x: Tensor) -> Tensor:
    """The complex conjugate; other tensors are returned as they are (PyTorch's `conj`)."""
    return apply("conj", x) if x.dtype.is_complex else x


def real(x: Tensor) -> Tensor:
    """The real part of a complex tensor; a real tensor itself."""
    return apply("real", x) if x.dtype.is_complex else x


def imag(x: Tensor) -> Tensor:
    """The imaginary part of a complex tensor (PyTorch refuses real tensors, and so does ember)."""
    if not x.dtype.is_complex:
        raise DTypeError(f"imag: expects a complex tensor, got {x.dtype}")
    return apply("imag", x)


def angle(x: Tensor) -> Tensor:
    """The argument of each element, in (-pi, pi]; for real tensors pi where negative, else 0 (NaN stays)."""
    if x.dtype.is_complex:
        return imag(x).atan2(real(x))
    if not x.dtype.is_float:
        x = x.cast(default_float())
    return x.new_zeros(x.shape).masked_fill(x < 0, math.pi).where(x == x, x)


def sgn(x: Tensor) -> Tensor:
    """`x / |x|` (0 at 0) for complex tensors; `sign` for real ones."""
    if not x.dtype.is_complex:
        return x.sign()
    size = x.abs()
    return x / size.masked_fill(size == 0, 1).cast(x.dtype)


def view_as_real(x: Tensor) -> Tensor:
    """A complex tensor of shape S as a real one of shape S + (2,): (real, imag) pairs."""
    if not x.dtype.is_complex:
        raise DTypeError(f"view_as_real: expects a complex tensor, got {x.dtype}")
    return stack([real(x), imag(x)], -1)


def view_as_complex(x: Tensor) -> Tensor:
    """A real tensor of shape S + (2,) (f32 or f64) as the complex tensor of shape S."""
    if not x.dtype.is_float or x.dtype.name not in ("f32", "f64"):
        raise DTypeError(f"view_as_complex: expects an f32 or f64 tensor, got {x.dtype}")
    if not x.ndim or x.shape[-1] != 2:
        raise ShapeError("view_as_complex", f"the last dimension must have size 2, got shape {x.shape}")
    return complex(x[..., 0], x[..., 1])


METHODS = {
    "conj": conj, "conj_physical": conj, "resolve_conj": lambda x: x, "resolve_neg": lambda x: x,
    "angle": angle, "sgn": sgn, "is_complex": is_complex,
    "real": property(real), "imag": property(imag),
}

__all__ = ["complex", "polar", "conj", "real", "imag", "angle", "sgn", "view_as_real", "view_as_complex",
           "is_complex"]
