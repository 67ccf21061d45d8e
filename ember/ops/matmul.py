"""The matmul primitive: batched matrix product with broadcasting batch dims (both operands >= 2-D).

Vectors and `outer` are handled in the tensor layer by adding and removing unit dims.

Example:
    >>> registry["matmul"].infer(Aval((5, 2, 3), f32), Aval((3, 4), f32))
    Aval(shape=(5, 2, 4), dtype=f32)
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import DTypeError, ShapeError
from .grad_utils import sum_to
from ..limits import check_size
from .primitive import Aval, broadcast_shapes, is_half, primitive, saves_partners


def _matmul_infer(a: Aval, b: Aval) -> Aval:
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise ShapeError("matmul", f"primitive needs operands of 2 or more dims, got {a.shape} and {b.shape}")
    if a.dtype is not b.dtype:
        raise DTypeError(f"matmul: operands must share a dtype, got {a.dtype} and {b.dtype}")
    if a.dtype.is_bool:
        raise DTypeError("matmul: not defined for bool tensors")
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError("matmul", f"shapes {a.shape} and {b.shape} cannot be multiplied "
                                   f"({a.shape[-1]} != {b.shape[-2]})")
    try:
        batch = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2])
    except ShapeError:
        raise ShapeError("matmul", f"batch dims of {a.shape} and {b.shape} do not broadcast") from None
    shape = batch + (a.shape[-2], b.shape[-1])
    check_size("matmul", shape, a.dtype)
    return Aval(shape, a.dtype)


def _matmul_vjp(ctx, g):
    (sa, _), (sb, _) = ctx.input_avals  # each side reads the other only (`saves_partners`)
    ga = sum_to(g @ ctx.input(1).transpose(-1, -2), sa) if ctx.needs_grad(0) else None
    if not ctx.needs_grad(1):
        gb = None
    elif len(sb) == 2:
        # One matrix b (for a whole batch of a): the sum over the batch of a_i^T g_i is one product with
        # the batch folded into its inner dim, not a batch of products summed after (a (batch, k, n)
        # temporary, the weight's size times the batch: huge for a vocabulary head). It is made as
        # (g^T a)^T, the view of an (n, k) product: a 2-D b is in practice a linear layer's (out, in)
        # weight read through its transposed view, and the transpose's own rule then gives that
        # weight's gradient in its C order.
        rows = math.prod(sa[:-1])  # g's leading dims are a's (no -1: an empty k or n would leave it open)
        gb = (g.reshape(rows, sb[-1]).transpose(-1, -2) @ ctx.input(0).reshape(rows, sa[-1])).transpose(-1, -2)
    else:
        gb = sum_to(ctx.input(0).transpose(-1, -2) @ g, sb)
    return ga, gb


def _matmul_reference(a, b):
    if is_half(a.dtype):
        return np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(a.dtype)
    return np.matmul(a, b)


primitive("matmul", infer=_matmul_infer, vjp=_matmul_vjp, cost="compute", saves=saves_partners)(_matmul_reference)
