"""Rows of the movement primitives: reshape, permute, expand, slice, slice_assign, cat, pad, flip.

reshape, permute, expand and slice are views (torch's strides, as the NumPy backend's are NumPy's): no
primitive writes into its inputs, so sharing memory is safe. slice_assign copies first.

Example:
    >>> ROWS["slice"](Aval((3,), f32), torch.arange(10.), ranges=((1, 8, 3),))
    tensor([1., 4., 7.])
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _slices(ranges):
    return tuple(slice(a, b, s) for a, b, s in ranges)


def _reshape(out, x, *, shape):
    return x.reshape(shape)


def _permute(out, x, *, dims):
    return x.permute(dims)


def _expand(out, x, *, shape):
    return x.expand(shape)


def _slice(out, x, *, ranges):
    return x[_slices(ranges)]


def _slice_assign(out, x, v, *, ranges):
    result = x.clone()
    result[_slices(ranges)] = v
    return result


def _cat(out, *xs, dim):
    return torch.cat(xs, dim=dim)


def _pad(out, x, *, pads, value):
    if x.ndim == 0 or not any(a or b for a, b in pads):
        return x.clone()
    flat = [p for pair in reversed(pads) for p in pair]  # torch's order: last dim first
    if x.dtype == torch.bool:
        return F.pad(x.to(torch.uint8), flat, value=float(bool(value))).bool()
    return F.pad(x, flat, value=value)


def _flip(out, x, *, dims):
    return torch.flip(x, dims) if dims else x


ROWS = {
    "reshape": _reshape, "permute": _permute, "expand": _expand, "slice": _slice,
    "slice_assign": _slice_assign, "cat": _cat, "pad": _pad, "flip": _flip,
}
"""Primitive name -> `row(out_aval, *tensors, **params) -> tensor`."""
