"""2-D max and average pooling (NCHW), PyTorch's rules: padding, dilation, ceil_mode, divisors.

A cube per output row (or per (n, c) plane when there are many, `PLANE_CUBES`), a unit per output
element; the window is a comptime-unrolled loop (its size is part of the kernel).
Output size per spatial dim: floor((n + 2p - d(k - 1) - 1) / s) + 1, or the ceiling with `ceil_mode`,
where a last window must start inside the input or its left padding.

- max: padding never wins, NaN propagates (the last NaN of a window is its winner, as in PyTorch),
  ties go to the first position; `max_pool2d_indices`
  gives the winner as a flat index h * W + w into the input's spatial dims.
- avg: sum / divisor, the divisor being the window clipped to the padded input
  (`count_include_pad`), or to the input itself, or `divisor_override`.

Example:
    >>> max_pool2d(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4), 2)
    array([[[[ 5.,  7.],
             [13., 15.]]]], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from typing import NamedTuple

from .. import cube
from ..dtype import f32, i64
from ..errors import ShapeError
from .common import asarray, check_size, contiguous, cube_dtype, empty, zeros
from .layout import element_strides
from .conv import _pair
from .reduce import identity

ROW_UNITS = 32  # the most units of a cube (one output row); fewer for narrower outputs
PLANE_CUBES = 64
"""From this many (n, c) planes a cube takes a whole plane, not one output row: the plane's start (two
integer divisions) is found once, not per row, and there are enough cubes to share among the threads
(docs/cube.md, "Kernel figures")."""


@cube.kernel
def pool_kernel(x: cube.Array, out: cube.Array, g: cube.Array[cube.i32], divisor: cube.f32,
                mode: cube.Comptime[str], T: cube.Comptime, kernel: cube.Comptime[tuple],
                stride: cube.Comptime[tuple], padding: cube.Comptime[tuple], dilation: cube.Comptime[tuple],
                count_include_pad: cube.Comptime[bool], override: cube.Comptime[bool], units: cube.Comptime[int],
                inner: cube.Comptime[bool], plane: cube.Comptime[bool]):
    """g = [C, H, W, OH, OW, x strides (4)]; mode is "max", "argmax" or "avg". A cube computes one output
    row (n, c, oy), or with `plane` all the rows of one (n, c) plane (`_geometry` says when); its units walk
    ox `units` at a time. `inner`: every window lies inside the input (no padding, no ceil_mode overhang),
    so no tap is tested."""
    oh = g[3]
    if plane:
        nc = cube.CUBE_POS
        base = plane_base(g, nc)
        for oy in range(oh):
            pool_row(x, out, g, divisor, base, nc * oh + oy, oy, mode, T, kernel, stride, padding, dilation,
                     count_include_pad, override, units, inner)
    else:
        row = cube.CUBE_POS
        pool_row(x, out, g, divisor, plane_base(g, row // oh), row, row % oh, mode, T, kernel, stride, padding,
                 dilation, count_include_pad, override, units, inner)


@cube.function
def plane_base(g, nc):
    """Where plane nc = n * C + c of x starts (x strides g[5], g[6])."""
    return (nc // g[0]) * g[5] + (nc % g[0]) * g[6]


@cube.function
def pool_row(x, out, g, divisor, base, row, oy, mode, T, kernel, stride, padding, dilation, count_include_pad,
             override, units, inner):
    """Output row `row` (output row oy of the plane at `base`), its units walking ox `units` at a time."""
    ow = g[4]
    y0 = oy * stride[0] - padding[0]
    for x00 in range(0, ow, units):
        # the last chunk is shifted back inside (the host keeps units <= ow): no lane is masked, a few
        # outputs are computed twice
        ox = cube.min(x00, ow - units) + cube.UNIT_POS_X
        out[row * ow + ox] = window(x, g, base, y0, ox * stride[1] - padding[1], divisor, mode, T, kernel,
                                    padding, dilation, count_include_pad, override, out.dtype, inner)


@cube.kernel
def max_pool_grad_kernel(x: cube.Array, grad: cube.Array, out: cube.Array, g: cube.Array[cube.i32],
                         T: cube.Comptime, kernel: cube.Comptime[tuple], stride: cube.Comptime[tuple],
                         padding: cube.Comptime[tuple], dilation: cube.Comptime[tuple], units: cube.Comptime[int],
                         inner: cube.Comptime[bool], plane: cube.Comptime[bool]):
    """The input gradient of a max pool whose windows do not overlap: each window finds its winner as
    `pool_kernel`'s argmax does, and writes grad to it and 0 to its other taps (taps in the padding are
    skipped). out is a C-contiguous (N, C, H, W); pixels of no window must already hold 0. Cubes as in
    `pool_kernel`: a row, or with `plane` a plane."""
    oh = g[3]
    if plane:
        nc = cube.CUBE_POS
        base = plane_base(g, nc)
        for oy in range(oh):
            grad_row(x, grad, out, g, base, nc, nc * oh + oy, oy, T, kernel, stride, padding, dilation, units, inner)
    else:
        row = cube.CUBE_POS
        nc = row // oh
        grad_row(x, grad, out, g, plane_base(g, nc), nc, row, row % oh, T, kernel, stride, padding, dilation, units,
                 inner)


@cube.function
def grad_row(x, grad, out, g, base, nc, row, oy, T, kernel, stride, padding, dilation, units, inner):
    """`max_pool_grad_kernel`'s windows of output row `row` (row oy of plane nc, whose x starts at `base`)."""
    h, w, ow = g[1], g[2], g[4]
    plane = nc * h * w
    y0 = oy * stride[0] - padding[0]
    for x00 in range(0, ow, units):
        ox = cube.min(x00, ow - units) + cube.UNIT_POS_X  # the last chunk shifted back inside, as above
        x0 = ox * stride[1] - padding[1]
        at = window(x, g, base, y0, x0, cube.f32(0), "argmax", T, kernel, padding, dilation, True, False, out.dtype,
                    inner)
        v = grad[row * ow + ox]
        for ky in cube.unroll(range(kernel[0])):
            for kx in cube.unroll(range(kernel[1])):
                iy = y0 + ky * dilation[0]
                ix = x0 + kx * dilation[1]
                if inner:
                    out[plane + iy * w + ix] = cube.select(at == cube.i64(iy * w + ix), v, out.dtype(0))
                elif iy >= 0 and iy < h and ix >= 0 and ix < w:
                    out[plane + iy * w + ix] = cube.select(at == cube.i64(iy * w + ix), v, out.dtype(0))


@cube.function
def window(x, g, base, y0, x0, divisor, mode, T, kernel, padding, dilation, count_include_pad, override, out_t,
           inner):
    """The pooled value (as `out_t`) of the window whose top-left tap is at (y0, x0) of plane `base`."""
    h, w = g[1], g[2]
    lowest = T(identity("max", T))
    best = lowest
    best_at = cube.i32(-1)
    first_at = y0 * w + x0 if inner else cube.i32(-1)  # the first tap inside: the winner if none beats `lowest`
    total = T(0)
    for ky in cube.unroll(range(kernel[0])):
        for kx in cube.unroll(range(kernel[1])):
            iy = y0 + ky * dilation[0]
            ix = x0 + kx * dilation[1]
            inside = True if inner else iy >= 0 and iy < h and ix >= 0 and ix < w
            v = T(x[base + (iy * g[7] + ix * g[8] if inner else cube.select(inside, iy * g[7] + ix * g[8], 0))])
            if mode == "avg":
                total = total + (v if inner else cube.select(inside, v, T(0)))
            else:
                # padding reads as `lowest`, which never wins; the last NaN wins, as in PyTorch. (One select
                # per test: gcc turns a mix of int and float tests into branches, or a masked gather.)
                v = v if inner else cube.select(inside, v, lowest)
                at = iy * w + ix
                nan = v != v
                better = v > best
                best_at = cube.select(nan, at, cube.select(better, at, best_at))
                best = cube.select(nan, v, cube.select(better, v, best))
                if not inner:
                    first_at = cube.select(first_at < 0 and inside, at, first_at)
    best_at = cube.select(best_at < 0, first_at, best_at)
    if mode == "max":
        return out_t(best)
    if mode == "argmax":
        return cube.i64(best_at)
    if override:
        d = divisor
    else:
        ylo = cube.max(y0, 0)
        xlo = cube.max(x0, 0)
        pad_y = cube.min(y0 + kernel[0], h + padding[0])
        pad_x = cube.min(x0 + kernel[1], w + padding[1])
        if count_include_pad:
            d = cube.f32((pad_y - y0) * (pad_x - x0))
        else:
            d = cube.f32((cube.min(pad_y, h) - ylo) * (cube.min(pad_x, w) - xlo))
    return out_t(total / T(d))


def pool_out_size(n: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    span = n + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


class _Geometry(NamedTuple):
    kernel: tuple
    stride: tuple
    padding: tuple
    dilation: tuple
    out: tuple  # (OH, OW)
    inner: bool  # every window lies inside the input: no tap is tested
    units: int  # units of a cube: a power of two <= OW, so few variants compile
    T: object  # the compute type: f32 for f16/bf16
    plane: bool  # a cube per (n, c) plane, not per output row (`PLANE_CUBES`)

    def grid(self, outputs: int) -> tuple:
        """(cube count, cube dim) of a launch over `outputs` output elements."""
        return cube.CubeCount(outputs // (self.out[1] * (self.out[0] if self.plane else 1))), cube.CubeDim(self.units)


def _geometry(op: str, x, kernel, stride, padding, dilation, ceil_mode) -> _Geometry:
    if x.ndim != 4:
        raise ShapeError(op, f"needs an (N, C, H, W) input, got {x.shape}")
    kernel = _pair(kernel)
    stride = _pair(stride if stride is not None else kernel)
    padding, dilation = _pair(padding), _pair(dilation)
    if any(2 * p > k for p, k in zip(padding, kernel)):
        raise ShapeError(op, f"padding {padding} must be at most half the kernel {kernel}")
    oh, ow = (pool_out_size(n, k, s, p, d, ceil_mode)
              for n, k, s, p, d in zip(x.shape[2:], kernel, stride, padding, dilation))
    if oh <= 0 or ow <= 0:
        raise ShapeError(op, f"kernel {kernel} does not fit the input {x.shape}")
    inner = padding == (0, 0) and all((o - 1) * s + d * (k - 1) < n for o, s, d, k, n in
                                      zip((oh, ow), stride, dilation, kernel, x.shape[2:]))
    t = cube_dtype(x.dtype)
    return _Geometry(kernel, stride, padding, dilation, (oh, ow), inner, min(ROW_UNITS, 1 << (ow.bit_length() - 1)),
                     f32 if t.is_float and t.itemsize < 4 else t, x.shape[0] * x.shape[1] >= PLANE_CUBES)


def _layout(x, geo: _Geometry) -> np.ndarray:
    return np.asarray([x.shape[1], x.shape[2], x.shape[3], *geo.out, *element_strides(x)], np.int32)


def _pool(mode, x, kernel, stride, padding, dilation, ceil_mode, count_include_pad=True, divisor_override=None):
    x = asarray(x)
    geo = _geometry(f"{mode}_pool2d", x, kernel, stride, padding, dilation, ceil_mode)
    out = empty(x.shape[:2] + geo.out, i64.np if mode == "argmax" else x.dtype, x)
    check_size("pool2d", x, out)
    if out.size:
        count, dim = geo.grid(out.size)
        pool_kernel.launch(count, dim, x, out, _layout(x, geo), float(divisor_override or 0), mode=mode,
                           units=geo.units, inner=geo.inner, plane=geo.plane, T=geo.T, kernel=geo.kernel,
                           stride=geo.stride, padding=geo.padding, dilation=geo.dilation if mode != "avg" else (1, 1),
                           count_include_pad=count_include_pad, override=divisor_override is not None)
    return out


def max_pool2d(x, kernel, stride=None, padding=0, dilation=1, ceil_mode=False) -> np.ndarray:
    """The maximum of each window (stride defaults to the kernel size)."""
    return _pool("max", x, kernel, stride, padding, dilation, ceil_mode)


def max_pool2d_indices(x, kernel, stride=None, padding=0, dilation=1, ceil_mode=False) -> np.ndarray:
    """Where each window's maximum is, as h * W + w (i64), first position on ties."""
    return _pool("argmax", x, kernel, stride, padding, dilation, ceil_mode)


def avg_pool2d(x, kernel, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None) -> np.ndarray:
    """The mean of each window, with PyTorch's divisor rules."""
    if divisor_override == 0:
        raise ShapeError("avg_pool2d", "divisor_override must be non-zero")
    return _pool("avg", x, kernel, stride, padding, 1, ceil_mode, count_include_pad, divisor_override)


def max_pool2d_grad(x, grad, kernel, stride=None, padding=0, dilation=1, ceil_mode=False) -> np.ndarray:
    """The gradient of `max_pool2d` with respect to x for windows that do not overlap (stride >= the
    dilated kernel along each dim): grad (N, C, OH, OW) goes to each window's winner (the position
    `max_pool2d_indices` names), every other pixel gets 0. One pass, no index array, no scatter.

    Example:
        >>> max_pool2d_grad(np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2), np.ones((1, 1, 1, 1), np.float32), 2)
        array([[[[0., 0.],
                 [0., 1.]]]], dtype=float32)
    """
    x, grad = asarray(x), asarray(grad)
    geo = _geometry("max_pool2d_grad", x, kernel, stride, padding, dilation, ceil_mode)
    if any(s < d * (k - 1) + 1 for k, s, d in zip(geo.kernel, geo.stride, geo.dilation)):
        raise ShapeError("max_pool2d_grad", f"windows overlap (kernel {geo.kernel}, stride {geo.stride}, dilation "
                                            f"{geo.dilation}): their gradients add up, use a scatter-add")
    if grad.shape != x.shape[:2] + geo.out or grad.dtype != x.dtype:
        raise ShapeError("max_pool2d_grad", f"gradient {grad.shape} {grad.dtype} does not fit the pool of {x.shape} "
                                            f"{x.dtype} (output {x.shape[:2] + geo.out})")
    # Windows that tile the input leave no pixel unwritten; otherwise the others are zeroed first.
    tiled = geo.inner and all(k == s and o * s == n for k, s, o, n in zip(geo.kernel, geo.stride, geo.out, x.shape[2:]))
    out = (empty if tiled else zeros)(x.shape, x.dtype, x)
    check_size("max_pool2d_grad", x, out)
    if grad.size:
        count, dim = geo.grid(grad.size)
        max_pool_grad_kernel.launch(count, dim, x, contiguous(grad), out, _layout(x, geo), T=geo.T, kernel=geo.kernel,
                                    stride=geo.stride, padding=geo.padding, dilation=geo.dilation, units=geo.units,
                                    inner=geo.inner, plane=geo.plane)
    return out
