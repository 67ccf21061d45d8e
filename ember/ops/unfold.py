"""`unfold` (im2col) and `fold` (col2im): PyTorch's `F.unfold`/`F.fold` for any number of spatial dims.

`unfold` takes x (N, C, *size) to (N, C * prod(kernel), L), L = prod(out) windows, with
y[n, c*K + k, l] = x_pad[n, c, o_l * stride + k * dilation] (k and l flattened row-major; `padding` is
zeros on both sides). `fold` is its adjoint: it sums such columns back into (N, C, *output_size),
overlapping windows adding up. Each one's gradient is the other.

Example:
    >>> registry["unfold"].infer(Aval((2, 3, 4, 4), f32), kernel=(2, 2), stride=(1, 1), padding=(0, 0),
    ...                          dilation=(1, 1))
    Aval(shape=(2, 12, 9), dtype=f32)
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError
from .primitive import Aval, primitive, saves_none
from .spatial import call, check_layout, col2im, conv_out_size, crop, pad_spatial, window_view


def _out(op: str, size, kernel, stride, padding, dilation) -> tuple[int, ...]:
    return tuple(conv_out_size(op, *a) for a in zip(size, kernel, stride, padding, dilation))


def _unfold_infer(x: Aval, *, kernel, stride, padding, dilation) -> Aval:
    check_layout("unfold", x.shape, len(kernel))
    out = _out("unfold", x.shape[2:], kernel, stride, padding, dilation)
    return Aval((x.shape[0], x.shape[1] * math.prod(kernel), math.prod(out)), x.dtype)


def _unfold_reference(x, *, kernel, stride, padding, dilation):
    out = _out("unfold", x.shape[2:], kernel, stride, padding, dilation)
    windows = window_view(pad_spatial(x, padding, padding), kernel, stride, dilation, out)
    return windows.reshape(x.shape[0], x.shape[1] * math.prod(kernel), math.prod(out))


def _unfold_vjp(ctx, g):
    (shape, _), = ctx.input_avals
    return (call("fold", g, output_size=tuple(shape[2:]), **ctx.params),)


primitive("unfold", infer=_unfold_infer, vjp=_unfold_vjp, saves=saves_none)(_unfold_reference)


def _fold_infer(x: Aval, *, output_size, kernel, stride, padding, dilation) -> Aval:
    if len(x.shape) != 3:
        raise ShapeError("fold", f"input of shape {x.shape} is not (N, C * prod(kernel), L)")
    taps = math.prod(kernel)
    out = _out("fold", output_size, kernel, stride, padding, dilation)
    if x.shape[1] % taps or x.shape[2] != math.prod(out):
        raise ShapeError("fold", f"input of shape {x.shape} does not fit kernel {tuple(kernel)} and output "
                                 f"size {tuple(output_size)}: dim 1 must be a multiple of {taps} and dim 2 "
                                 f"must be {math.prod(out)} (the number of windows, {out})")
    return Aval((x.shape[0], x.shape[1] // taps) + tuple(output_size), x.dtype)


def _fold_reference(x, *, output_size, kernel, stride, padding, dilation):
    out = _out("fold", output_size, kernel, stride, padding, dilation)
    cols = x.reshape((x.shape[0], x.shape[1] // math.prod(kernel)) + tuple(kernel) + out)
    padded = tuple(n + 2 * p for n, p in zip(output_size, padding))
    return np.ascontiguousarray(crop(col2im(cols, padded, stride, dilation), padding, output_size))


def _fold_vjp(ctx, g):
    params = dict(ctx.params)
    params.pop("output_size")
    return (call("unfold", g, **params),)


primitive("fold", infer=_fold_infer, vjp=_fold_vjp, saves=saves_none)(_fold_reference)
