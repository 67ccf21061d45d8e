"""Movement primitives: reshape, permute, expand, slice, slice_assign, cat, pad (constant), flip.

Parameters arrive normalized from the tensor layer: `slice` gets one (start, stop, step) per dim with
`0 <= start <= stop <= size` and `step > 0`; negative steps are a `flip` followed by a slice. Reflect and
replicate padding are `index_select`s in the tensor layer, so only constant padding is a primitive.

Example:
    >>> registry["slice"].infer(Aval((10,), f32), ranges=((1, 8, 3),))
    Aval(shape=(3,), dtype=f32)
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import DTypeError, ShapeError
from .grad_utils import sum_to
from ..limits import check_size
from .primitive import Aval, primitive, saves_none


def _reshape_infer(x: Aval, *, shape: tuple[int, ...]) -> Aval:
    if math.prod(shape) != math.prod(x.shape):
        raise ShapeError("reshape", f"cannot reshape {x.shape} ({math.prod(x.shape)} elements) "
                                    f"into {shape} ({math.prod(shape)} elements)")
    return Aval(shape, x.dtype)


primitive("reshape", infer=_reshape_infer, saves=saves_none,
          vjp=lambda ctx, g: (g.reshape(ctx.input_avals[0].shape),))(
    lambda x, *, shape: x.reshape(shape))


def _permute_infer(x: Aval, *, dims: tuple[int, ...]) -> Aval:
    shape = x.shape
    if sorted(dims) != list(range(len(shape))):
        raise ShapeError("permute", f"dims {dims} are not a permutation of the {len(shape)} dims of {shape}")
    return Aval(tuple([shape[d] for d in dims]), x.dtype)


def _permute_vjp(ctx, g):
    dims = ctx.params["dims"]
    inverse = [0] * len(dims)
    for i, d in enumerate(dims):
        inverse[d] = i
    return (g.permute(*inverse),)


primitive("permute", infer=_permute_infer, vjp=_permute_vjp, saves=saves_none)(lambda x, *, dims: x.transpose(dims))


def _expand_infer(x: Aval, *, shape: tuple[int, ...]) -> Aval:
    lead = len(shape) - len(x.shape)
    ok = lead >= 0 and all(s == n or s == 1 for s, n in zip(x.shape, shape[lead:]))
    if not ok:
        raise ShapeError("expand", f"cannot expand {x.shape} to {shape}")
    check_size("expand", shape, x.dtype)
    return Aval(shape, x.dtype)


primitive("expand", infer=_expand_infer, saves=saves_none,
          vjp=lambda ctx, g: (sum_to(g, ctx.input_avals[0].shape),))(
    lambda x, *, shape: np.broadcast_to(x, shape))


def _slice_shape(shape, ranges):
    # `b - a` for unit steps keeps the formula of a traced size (ONNX export's SymInt); len(range) would not
    return tuple(max(b - a, 0) if s == 1 else len(range(a, b, s)) for a, b, s in ranges) + tuple(shape[len(ranges):])


def _slice_infer(x: Aval, *, ranges: tuple[tuple[int, int, int], ...]) -> Aval:
    if len(ranges) > len(x.shape):
        raise ShapeError("slice", f"{len(ranges)} ranges for a tensor of shape {x.shape}")
    return Aval(_slice_shape(x.shape, ranges), x.dtype)


def _slices(ranges):
    return tuple(slice(a, b, s) for a, b, s in ranges)


def _slice_vjp(ctx, g):
    (shape, _), = ctx.input_avals
    return (g.new_zeros(shape)._slice_assign_ranges(ctx.params["ranges"], g),)


primitive("slice", infer=_slice_infer, vjp=_slice_vjp, saves=saves_none)(lambda x, *, ranges: x[_slices(ranges)])


def _slice_assign_infer(x: Aval, v: Aval, *, ranges) -> Aval:
    want = _slice_shape(x.shape, ranges)
    if v.shape != want:
        raise ShapeError("slice_assign", f"value of shape {v.shape} does not fit the slice of shape {want}")
    if v.dtype is not x.dtype:
        raise DTypeError(f"slice_assign: value dtype {v.dtype} differs from tensor dtype {x.dtype}")
    return x


def _slice_assign_reference(x, v, *, ranges):
    out = x.copy()
    out[_slices(ranges)] = v
    return out


def _slice_assign_vjp(ctx, g):
    ranges = ctx.params["ranges"]
    return g._slice_assign_ranges(ranges, g.new_zeros(ctx.input_avals[1].shape)), g._slice_ranges(ranges)


primitive("slice_assign", infer=_slice_assign_infer, vjp=_slice_assign_vjp, saves=saves_none)(_slice_assign_reference)


def _cat_infer(*xs: Aval, dim: int) -> Aval:
    first = xs[0]
    for x in xs[1:]:
        if len(x.shape) != len(first.shape) or any(
                a != b for i, (a, b) in enumerate(zip(x.shape, first.shape)) if i != dim):
            raise ShapeError("cat", f"shapes {first.shape} and {x.shape} differ outside dim {dim}")
        if x.dtype is not first.dtype:
            raise DTypeError(f"cat: tensors must share a dtype, got {first.dtype} and {x.dtype}")
    size = sum(x.shape[dim] for x in xs)
    return Aval(first.shape[:dim] + (size,) + first.shape[dim + 1:], first.dtype)


def _cat_vjp(ctx, g):
    dim = ctx.params["dim"]
    out, start = [], 0
    for shape, _ in ctx.input_avals:
        out.append(g.narrow(dim, start, shape[dim]))
        start += shape[dim]
    return tuple(out)


primitive("cat", infer=_cat_infer, vjp=_cat_vjp, saves=saves_none)(lambda *xs, dim: np.concatenate(xs, axis=dim))


def _pad_infer(x: Aval, *, pads: tuple[tuple[int, int], ...], value) -> Aval:
    if len(pads) != len(x.shape) or any(a < 0 or b < 0 for a, b in pads):
        raise ShapeError("pad", f"padding {pads} does not fit shape {x.shape}")
    return Aval(tuple(n + a + b for n, (a, b) in zip(x.shape, pads)), x.dtype)


def _pad_vjp(ctx, g):
    (shape, _), = ctx.input_avals
    ranges = tuple((a, a + n, 1) for n, (a, _) in zip(shape, ctx.params["pads"]))
    return (g._slice_ranges(ranges),)


primitive("pad", infer=_pad_infer, vjp=_pad_vjp, saves=saves_none)(
    lambda x, *, pads, value: np.pad(x, pads, constant_values=np.asarray(value).astype(x.dtype)))


def _flip_infer(x: Aval, *, dims: tuple[int, ...]) -> Aval:
    return x


primitive("flip", infer=_flip_infer, saves=saves_none, vjp=lambda ctx, g: (g.flip(*ctx.params["dims"]),))(
    lambda x, *, dims: np.flip(x, dims) if dims else x)
