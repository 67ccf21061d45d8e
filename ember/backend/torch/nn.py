"""Rows of the module primitives: convolutions, pools, unfold/fold, on torch's own kernels.

torch has these for float tensors of 1 to 3 spatial dims (unfold and fold: 2); other cases raise
`Unsupported`, so the backend runs the NumPy reference (recorded in `fallbacks`). f16 and bf16 compute
in f32 and round once; on CUDA the convolutions run in full f32, not cuDNN's default TF32.
`conv_transpose` takes any `output_padding` (a negative one crops): it runs unpadded and crops the full
output, as the reference does. `conv_weight_grad` takes an output gradient that covers only the leading
outputs (the rest count as zero).

Example:
    >>> x, w = torch.ones(1, 1, 5), torch.ones(2, 1, 3)
    >>> ROWS["conv"](Aval((1, 2, 3), f32), x, w, stride=(1,), padding=(0,), dilation=(1,), groups=1).shape
    torch.Size([1, 2, 3])
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .convert import Unsupported, f32_for_halves


def _native(x, nd: int, family: dict):
    """torch's function of `family` for `nd` spatial dims on `x`'s dtype, or `Unsupported`."""
    fn = family.get(nd)
    if fn is None or not x.dtype.is_floating_point:
        raise Unsupported(f"no torch kernel for {nd} spatial dims of {x.dtype}")
    return fn


CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
WEIGHT = {1: torch.nn.grad.conv1d_weight, 2: torch.nn.grad.conv2d_weight, 3: torch.nn.grad.conv3d_weight}
MAX = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
AVG = {2: F.avg_pool2d, 3: F.avg_pool3d}  # 1-d runs as 2-d (avg_pool1d has no divisor_override)


def _ieee(row):
    """`row` with cuDNN held to full f32 on CUDA tensors (it takes TF32 by default on Ampere and later,
    about 3 decimal digits), the user's setting restored after."""

    def run(out, x, *rest, **params):
        if x.device.type != "cuda":
            return row(out, x, *rest, **params)
        previous = torch.backends.cudnn.allow_tf32
        torch.backends.cudnn.allow_tf32 = False
        try:
            return row(out, x, *rest, **params)
        finally:
            torch.backends.cudnn.allow_tf32 = previous

    return run


def _conv(out, x, w, *, stride, padding, dilation, groups):
    return _native(x, len(stride), CONV)(x, w, None, stride, padding, dilation, groups)


def _conv_transpose(out, x, w, *, stride, padding, output_padding, dilation, groups):
    full = _native(x, len(stride), CONV_T)(x, w, None, stride, 0, 0, groups, dilation)
    final = out.shape[2:]
    grow = [p + f - n for p, f, n in zip(padding, final, full.shape[2:])]
    if any(g > 0 for g in grow):
        full = F.pad(full, [a for g in reversed(grow) for a in (0, max(g, 0))])
    return full[(slice(None), slice(None)) + tuple(slice(p, p + f) for p, f in zip(padding, final))]


def _conv_weight_grad(out, x, g, *, kernel, stride, padding, dilation, groups):
    nd = len(stride)
    fn = _native(x, nd, WEIGHT)
    full = [(n + 2 * p - d * (k - 1) - 1) // s + 1
            for n, k, s, p, d in zip(x.shape[2:], kernel, stride, padding, dilation)]
    missing = [f - m for f, m in zip(full, g.shape[2:])]
    if any(missing):
        g = F.pad(g, [a for m in reversed(missing) for a in (0, m)])
    return fn(x, (g.shape[1], x.shape[1] // groups) + tuple(kernel), g, stride, padding, dilation, groups)


def _max_pool(x, kernel, stride, padding, dilation, ceil_mode, indices):
    return _native(x, len(kernel), MAX)(x, kernel, stride, padding, dilation, ceil_mode=ceil_mode,
                                          return_indices=indices)


def _max_pool_values(out, x, *, kernel, stride, padding, dilation, ceil_mode):
    return _max_pool(x, kernel, stride, padding, dilation, ceil_mode, False)


def _max_pool_indices(out, x, *, kernel, stride, padding, dilation, ceil_mode):
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()  # exact: the winner of f32 copies is the winner
    return _max_pool(x, kernel, stride, padding, dilation, ceil_mode, True)[1]


def _max_pool_grad(out, x, g, *, kernel, stride, padding, dilation, ceil_mode):
    index = _max_pool_indices(out, x, kernel=kernel, stride=stride, padding=padding, dilation=dilation,
                              ceil_mode=ceil_mode)
    flat = torch.zeros(x.shape[:2] + (math.prod(x.shape[2:]),), dtype=g.dtype, device=g.device)
    return flat.scatter_add(2, index.flatten(2), g.flatten(2)).reshape(x.shape)


def _avg_pool(out, x, *, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    one = len(kernel) == 1
    if one:  # as 2-d over a unit row
        x, kernel, stride, padding = x.unsqueeze(2), (1,) + tuple(kernel), (1,) + tuple(stride), (0,) + tuple(padding)
    y = _native(x, len(kernel), AVG)(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
    return y.squeeze(2) if one else y


def _unfold(out, x, *, kernel, stride, padding, dilation):
    if len(kernel) != 2 or not x.dtype.is_floating_point:
        raise Unsupported("torch's unfold takes 2 spatial dims of floats")
    return F.unfold(x, kernel, dilation, padding, stride)


def _fold(out, x, *, output_size, kernel, stride, padding, dilation):
    if len(kernel) != 2 or not x.dtype.is_floating_point:
        raise Unsupported("torch's fold takes 2 spatial dims of floats")
    return F.fold(x, output_size, kernel, dilation, padding, stride)


ROWS = {
    "conv": f32_for_halves(_ieee(_conv)),
    "conv_transpose": f32_for_halves(_ieee(_conv_transpose)),
    "conv_weight_grad": f32_for_halves(_ieee(_conv_weight_grad)),
    "max_pool": f32_for_halves(_max_pool_values),
    "max_pool_indices": _max_pool_indices,
    "max_pool_grad": _max_pool_grad,
    "avg_pool": f32_for_halves(_avg_pool),
    "unfold": f32_for_halves(_unfold),
    "fold": f32_for_halves(_fold),
}
"""Primitive name -> `row(out_aval, *tensors, **params) -> tensor`."""
