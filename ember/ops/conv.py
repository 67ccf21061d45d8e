"""Convolution primitives over any number of spatial dims: `conv`, `conv_transpose`, `conv_weight_grad`.

Layouts are PyTorch's: input (N, C, *spatial); `conv` weight (out, in/groups, *kernel); `conv_transpose`
weight (in, out/groups, *kernel). Params arrive normalized from `ember.nn.functional`: one int per spatial
dim for `stride`, `padding` (symmetric zero padding), `dilation` and `output_padding`.

The three are adjoint to each other, so each one's gradient is written with the others:

    conv(x, w):             dx = conv_transpose(g, w)       dw = conv_weight_grad(x, g)
    conv_transpose(x, w):   dx = conv(g, w)                 dw = conv_weight_grad(g, x)
    conv_weight_grad(x, g): dx = conv_transpose(g, c)       dg = conv(x, c)

Math (1-d, groups = 1): y[n, o, i] = sum_{c, k} x_pad[n, c, i*s + k*d] * w[o, c, k]. `conv_transpose`
scatters instead of gathers: y_full[n, o, i*s + k*d] += x[n, c, i] * w[c, o, k], then crops `padding` from
the start and keeps (H-1)s - 2p + d(k-1) + 1 + output_padding elements. The primitive accepts any
`output_padding` that leaves a positive size (a negative one crops further, which gradient rules use);
the user-facing function enforces PyTorch's 0 <= output_padding < max(stride, dilation).

Example:
    >>> registry["conv"].infer(Aval((8, 3, 28, 28), f32), Aval((16, 3, 3, 3), f32),
    ...                        stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1)
    Aval(shape=(8, 16, 28, 28), dtype=f32)
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError
from .primitive import Aval, primitive, saves_partners
from .spatial import batch_slices, call, check_float, check_layout, col2im, compute_dtype, conv_out_size, \
    crop, pad_spatial, window_view


def _check_groups(op: str, channels: int, out_channels: int, groups: int, x_shape, w_shape) -> None:
    if groups < 1 or channels % groups or out_channels % groups:
        raise ShapeError(op, f"groups={groups} must divide both the input channels ({channels}) and the "
                             f"output channels ({out_channels}); input {x_shape}, weight {w_shape}")


# ---- conv ----------------------------------------------------------------------------------------

def _conv_infer(x: Aval, w: Aval, *, stride, padding, dilation, groups) -> Aval:
    nd = len(stride)
    check_layout("conv", x.shape, nd)
    check_layout("conv", w.shape, nd, "weight")
    check_float("conv", x, w)
    _check_groups("conv", x.shape[1], w.shape[0], groups, x.shape, w.shape)
    if x.shape[1] != w.shape[1] * groups:
        raise ShapeError("conv", f"input of shape {x.shape} has {x.shape[1]} channels but weight of shape "
                                 f"{w.shape} with groups={groups} expects {w.shape[1] * groups}")
    out = tuple(conv_out_size("conv", n, k, s, p, d)
                for n, k, s, p, d in zip(x.shape[2:], w.shape[2:], stride, padding, dilation))
    return Aval((x.shape[0], w.shape[0]) + out, x.dtype)


def _conv_reference(x, w, *, stride, padding, dilation, groups):
    acc = compute_dtype(x.dtype)
    n, c = x.shape[:2]
    o, kernel, g = w.shape[0], w.shape[2:], groups
    out = tuple(conv_out_size("conv", *a) for a in zip(x.shape[2:], kernel, stride, padding, dilation))
    padded = pad_spatial(x.astype(acc, copy=False), padding, padding)
    weights = w.astype(acc, copy=False).reshape(g, o // g, (c // g) * math.prod(kernel))
    pixels = math.prod(out)
    y = np.empty((o, n, pixels), dtype=acc)
    for part in batch_slices(n, c * math.prod(kernel) * pixels):
        # im2col (one copy of the windows), then one GEMM per group over the whole batch slice,
        # (O/G, C/G*kernel) @ (C/G*kernel, batch*out), written in place as (O, batch, out); one copy puts
        # the batch back in front (a transposed view would leave later ops mixing layouts).
        cols = _columns(window_view(padded[part], kernel, stride, dilation, out), g)
        np.matmul(weights, cols, out=y.reshape(g, o // g, n * pixels)[..., part.start * pixels:part.stop * pixels])
    return np.ascontiguousarray(y.transpose(1, 0, 2).reshape((n, o) + out), dtype=x.dtype)


def _columns(windows: np.ndarray, groups: int) -> np.ndarray:
    """A (N, C, *kernel, *out) window view copied to (groups, C/G*kernel, N*out): GEMM operands in which
    the whole batch is one matrix, so each convolution is one BLAS call per group, not one per sample."""
    nb, c = windows.shape[:2]
    nd = (windows.ndim - 2) // 2
    taps = (c // groups) * math.prod(windows.shape[2:2 + nd])
    order = (1,) + tuple(range(2, 2 + nd)) + (0,) + tuple(range(2 + nd, 2 + 2 * nd))
    return np.ascontiguousarray(windows.transpose(order)).reshape(groups, taps, nb * math.prod(windows.shape[2 + nd:]))


def _channels_first(a: np.ndarray, groups: int) -> np.ndarray:
    """(N, C, *spatial) copied to (groups, C/G, N*spatial): the batch folded into GEMM columns."""
    n, c = a.shape[:2]
    pixels = math.prod(a.shape[2:])
    return np.ascontiguousarray(a.reshape(n, c, pixels).transpose(1, 0, 2)).reshape(groups, c // groups, n * pixels)


def _conv_vjp(ctx, g):
    (x_shape, _), (w_shape, _) = ctx.input_avals  # each side reads the other only (`saves_partners`)
    p = ctx.params
    extra = _transpose_output_padding(x_shape[2:], g.shape[2:], w_shape[2:], p["stride"], p["padding"],
                                      p["dilation"])
    gx = call("conv_transpose", g, ctx.input(1), output_padding=extra, **p) if ctx.needs_grad(0) else None
    gw = call("conv_weight_grad", ctx.input(0), g, kernel=tuple(w_shape[2:]), **p) if ctx.needs_grad(1) else None
    return gx, gw


def _transpose_output_padding(size, out, kernel, stride, padding, dilation) -> tuple[int, ...]:
    """The `output_padding` that makes `conv_transpose` of a map of size `out` come back to `size`."""
    return tuple(n + 2 * p - ((o - 1) * s + d * (k - 1) + 1)
                 for n, o, k, s, p, d in zip(size, out, kernel, stride, padding, dilation))


primitive("conv", infer=_conv_infer, vjp=_conv_vjp, cost="compute", saves=saves_partners)(_conv_reference)


# ---- conv_transpose ------------------------------------------------------------------------------

def _transpose_size(h, k, s, p, op, d) -> int:
    return (h - 1) * s - 2 * p + d * (k - 1) + 1 + op


def _conv_transpose_infer(x: Aval, w: Aval, *, stride, padding, output_padding, dilation, groups) -> Aval:
    nd = len(stride)
    check_layout("conv_transpose", x.shape, nd)
    check_layout("conv_transpose", w.shape, nd, "weight")
    check_float("conv_transpose", x, w)
    if x.shape[1] != w.shape[0]:
        raise ShapeError("conv_transpose", f"input of shape {x.shape} has {x.shape[1]} channels but weight "
                                           f"of shape {w.shape} expects {w.shape[0]}")
    _check_groups("conv_transpose", x.shape[1], w.shape[1] * groups, groups, x.shape, w.shape)
    out = tuple(_transpose_size(*args) for args in zip(x.shape[2:], w.shape[2:], stride, padding,
                                                        output_padding, dilation))
    if any(n < 1 for n in out):
        raise ShapeError("conv_transpose", f"input of shape {x.shape} with weight {w.shape}, stride {stride}, "
                                           f"padding {padding} gives an empty output {out}")
    return Aval((x.shape[0], w.shape[1] * groups) + out, x.dtype)


def _conv_transpose_reference(x, w, *, stride, padding, output_padding, dilation, groups):
    acc = compute_dtype(x.dtype)
    n, c = x.shape[:2]
    size, kernel, g = x.shape[2:], w.shape[2:], groups
    o = w.shape[1] * g
    # Each input pixel times the weight gives an (O/G, *kernel) patch: one GEMM per group over the whole
    # batch slice, (O/G*kernel, C/G) @ (C/G, batch*pixels); col2im then sums the patches into the full
    # output, kept channel-major (O, N, *full) so that each of its adds reads the patches contiguously...
    weights = w.astype(acc, copy=False).reshape(g, c // g, (o // g) * math.prod(kernel)).transpose(0, 2, 1)
    final = tuple(_transpose_size(*a) for a in zip(size, kernel, stride, padding, output_padding, dilation))
    full = tuple(max((h - 1) * s + d * (k - 1) + 1, p + f)
                 for h, k, s, d, p, f in zip(size, kernel, stride, dilation, padding, final))
    y = np.zeros((o, n) + full, dtype=acc)
    nd = len(size)
    for part in batch_slices(n, o * math.prod(kernel) * math.prod(size)):
        patches = np.matmul(weights, _channels_first(x[part].astype(acc, copy=False), g))
        patches = patches.reshape((o,) + kernel + (y[:, part].shape[1],) + size)  # (O, *kernel, batch, *pixels)
        col2im(np.moveaxis(patches, 1 + nd, 1), full, stride, dilation, out=y[:, part])
    # ...which is cropped by `padding` at the start and to the output size at the end, batch first again.
    return np.ascontiguousarray(crop(y, padding, final).swapaxes(0, 1), dtype=x.dtype)


def _conv_transpose_vjp(ctx, g):
    (x_shape, _), (w_shape, _) = ctx.input_avals  # each side reads the other only (`saves_partners`)
    p = dict(ctx.params)
    extra = p.pop("output_padding")
    if any(e < 0 for e in extra):
        # A negative output_padding cropped the end of the full output; its adjoint pads zeros back.
        g = g.pad([a for e in reversed(extra) for a in (0, max(-e, 0))])
    gx = gw = None
    if ctx.needs_grad(0):
        gx = call("conv", g, ctx.input(1), **p)
        if gx.shape != tuple(x_shape):  # output_padding >= stride made outputs no input pixel reaches
            gx = gx._slice_ranges(tuple((0, n, 1) for n in x_shape))
    if ctx.needs_grad(1):
        gw = call("conv_weight_grad", g, ctx.input(0), kernel=tuple(w_shape[2:]), **p)
    return gx, gw


primitive("conv_transpose", infer=_conv_transpose_infer, vjp=_conv_transpose_vjp, cost="compute",
          saves=saves_partners)(
    _conv_transpose_reference)


# ---- conv_weight_grad ----------------------------------------------------------------------------

def _weight_grad_infer(x: Aval, g: Aval, *, kernel, stride, padding, dilation, groups) -> Aval:
    nd = len(stride)
    check_layout("conv_weight_grad", x.shape, nd)
    check_layout("conv_weight_grad", g.shape, nd, "output gradient")
    check_float("conv_weight_grad", x, g)
    _check_groups("conv_weight_grad", x.shape[1], g.shape[1], groups, x.shape, g.shape)
    full = tuple(conv_out_size("conv_weight_grad", *a) for a in zip(x.shape[2:], kernel, stride, padding,
                                                                     dilation))
    # The gradient may cover only the leading outputs (the rest then count as zero), which is what
    # conv_transpose's rule needs when output_padding reaches past the last input pixel.
    if x.shape[0] != g.shape[0] or any(m > f for m, f in zip(g.shape[2:], full)):
        raise ShapeError("conv_weight_grad", f"output gradient of shape {g.shape} does not fit input "
                                             f"{x.shape} (full output size {full})")
    return Aval((g.shape[1], x.shape[1] // groups) + tuple(kernel), x.dtype)


def _weight_grad_reference(x, g, *, kernel, stride, padding, dilation, groups):
    acc = compute_dtype(x.dtype)
    n, c = x.shape[:2]
    o, out, grp = g.shape[1], g.shape[2:], groups
    kernel = tuple(kernel)
    padded = pad_spatial(x.astype(acc, copy=False), padding, padding)
    dw = np.zeros((grp, o // grp, (c // grp) * math.prod(kernel)), dtype=acc)
    for part in batch_slices(n, c * math.prod(kernel) * math.prod(out)):
        cols = _columns(window_view(padded[part], kernel, stride, dilation, out), grp)
        # One GEMM per group, summing over batch and pixels: (O/G, batch*out) @ (batch*out, C/G*kernel).
        dw += np.matmul(_channels_first(g[part].astype(acc, copy=False), grp), cols.transpose(0, 2, 1))
    return dw.reshape((o, c // grp) + kernel).astype(x.dtype, copy=False)


def _weight_grad_vjp(ctx, cot):
    (x_shape, _), (g_shape, _) = ctx.input_avals  # each side reads the other only (`saves_partners`)
    p = dict(ctx.params)
    kernel = p.pop("kernel")
    extra = _transpose_output_padding(x_shape[2:], g_shape[2:], kernel, p["stride"], p["padding"], p["dilation"])
    gx = call("conv_transpose", ctx.input(1), cot, output_padding=extra, **p) if ctx.needs_grad(0) else None
    gg = None
    if ctx.needs_grad(1):
        gg = call("conv", ctx.input(0), cot, **p)
        if gg.shape != tuple(g_shape):
            gg = gg._slice_ranges(tuple((0, n, 1) for n in g_shape))
    return gx, gg


primitive("conv_weight_grad", infer=_weight_grad_infer, vjp=_weight_grad_vjp, cost="compute",
          saves=saves_partners)(
    _weight_grad_reference)
