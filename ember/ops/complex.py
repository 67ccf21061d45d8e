"""Complex primitives: `conj`, `real`, `imag` (complex -> its real dtype) and `complex` (two real parts ->
their complex dtype), with PyTorch's conjugate-Wirtinger gradient rules.

A gradient of a real loss L with respect to a complex value z = x + iy is dL/dx + i dL/dy (PyTorch's
convention, docs/complex.md). So `real`'s rule gives its real cotangent back as a complex number,
`imag`'s gives i times it, `complex`'s splits its cotangent into the parts, and `conj`'s conjugates it.
These rules handle complex operands themselves (`complex_rule=True`); every other primitive's rule is
applied to complex operands as `conj(vjp(conj(g)))` by autodiff (`ember.ops.primitive`).

Example:
    >>> registry["real"].infer(Aval((2,), c64))
    Aval(shape=(2,), dtype=f32)
"""

from __future__ import annotations

import numpy as np

from ..dtype import complex_of, real_of
from ..errors import DTypeError
from .grad_utils import sum_to
from .primitive import Aval, broadcast_shapes, primitive, saves_none
from .spatial import call


def _complex_only(name: str):
    def infer(x: Aval) -> Aval:
        if not x.dtype.is_complex:
            raise DTypeError(f"{name}: expects a complex tensor, got {x.dtype}")
        return Aval(x.shape, real_of(x.dtype))

    return infer


def _conj_infer(x: Aval) -> Aval:
    if not x.dtype.is_complex:
        raise DTypeError(f"conj: the primitive takes complex tensors (the API returns others as they are), "
                         f"got {x.dtype}")
    return x


def _complex_infer(re: Aval, im: Aval) -> Aval:
    if re.dtype is not im.dtype or not re.dtype.is_float:
        raise DTypeError(f"complex: expects real and imag of one float dtype (f32 or f64), got {re.dtype} and "
                         f"{im.dtype}")
    return Aval(broadcast_shapes("complex", re.shape, im.shape), complex_of(re.dtype, "complex"))


def _complex_vjp(ctx, g):
    (sr, _), (si, _) = ctx.input_avals
    gr = sum_to(call("real", g), sr) if ctx.needs_grad(0) else None
    gi = sum_to(call("imag", g), si) if ctx.needs_grad(1) else None
    return gr, gi


def _make_complex(re: np.ndarray, im: np.ndarray) -> np.ndarray:
    out = np.empty(np.broadcast_shapes(re.shape, im.shape), complex_of_np(re.dtype))
    out.real, out.imag = re, im
    return out


def complex_of_np(dtype: np.dtype) -> np.dtype:
    """The NumPy complex dtype with parts of `dtype` (f32 -> complex64)."""
    return np.result_type(dtype, np.complex64)


primitive("conj", infer=_conj_infer, vjp=lambda c, g: (call("conj", g),), saves=saves_none,
          complex_rule=True)(np.conj)
primitive("real", infer=_complex_only("real"), vjp=lambda c, g: (call("complex", g, g.zeros_like()),),
          saves=saves_none, complex_rule=True)(lambda x: np.ascontiguousarray(x.real))
primitive("imag", infer=_complex_only("imag"), vjp=lambda c, g: (call("complex", g.zeros_like(), g),),
          saves=saves_none, complex_rule=True)(lambda x: np.ascontiguousarray(x.imag))
primitive("complex", infer=_complex_infer, vjp=_complex_vjp, saves=saves_none, complex_rule=True)(_make_complex)
