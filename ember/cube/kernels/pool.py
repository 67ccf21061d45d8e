"""2-D max and average pooling (NCHW), PyTorch's rules: padding, dilation, ceil_mode, divisors.

A cube per output row, a unit per output element; the window is a comptime-unrolled loop (its size is
part of the kernel).
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

from ... import cube
from ...dtype import f32, i64
from ...errors import ShapeError
from .common import asarray, check_size, cube_dtype, element_strides, empty
from .conv import _pair
from .reduce import identity

ROW_UNITS = 32  # the most units of a cube (one output row); fewer for narrower outputs


@cube.kernel
def pool_kernel(x: cube.Array, out: cube.Array, g: cube.Array[cube.i32], divisor: cube.f32,
                mode: cube.Comptime[str], T: cube.Comptime, kernel: cube.Comptime[tuple],
                stride: cube.Comptime[tuple], padding: cube.Comptime[tuple], dilation: cube.Comptime[tuple],
                count_include_pad: cube.Comptime[bool], override: cube.Comptime[bool], units: cube.Comptime[int],
                inner: cube.Comptime[bool]):
    """g = [C, H, W, OH, OW, x strides (4)]; mode is "max", "argmax" or "avg". A cube computes one output
    row (n, c, oy), its units walking ox `units` at a time: the row's start is found once per cube.
    `inner`: every window lies inside the input (no padding, no ceil_mode overhang), so no tap is tested."""
    row = cube.CUBE_POS
    oh, ow = g[3], g[4]
    nc = row // oh
    base = (nc // g[0]) * g[5] + (nc % g[0]) * g[6]
    y0 = (row % oh) * stride[0] - padding[0]
    for x00 in range(0, ow, units):
        # the last chunk is shifted back inside (the host keeps units <= ow): no lane is masked, a few
        # outputs are computed twice
        ox = cube.min(x00, ow - units) + cube.UNIT_POS_X
        out[row * ow + ox] = window(x, g, base, y0, ox * stride[1] - padding[1], divisor, mode, T, kernel,
                                    padding, dilation, count_include_pad, override, out.dtype, inner)


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


def _pool(mode, x, kernel, stride, padding, dilation, ceil_mode, count_include_pad=True, divisor_override=None):
    x = asarray(x)
    if x.ndim != 4:
        raise ShapeError(f"{mode}_pool2d", f"needs an (N, C, H, W) input, got {x.shape}")
    kernel = _pair(kernel)
    stride = _pair(stride if stride is not None else kernel)
    padding, dilation = _pair(padding), _pair(dilation)
    if any(2 * p > k for p, k in zip(padding, kernel)):
        raise ShapeError(f"{mode}_pool2d", f"padding {padding} must be at most half the kernel {kernel}")
    oh, ow = (pool_out_size(n, k, s, p, d, ceil_mode)
              for n, k, s, p, d in zip(x.shape[2:], kernel, stride, padding, dilation))
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"{mode}_pool2d", f"kernel {kernel} does not fit the input {x.shape}")
    t = cube_dtype(x.dtype)
    out = empty(x.shape[:2] + (oh, ow), i64.np if mode == "argmax" else x.dtype, x)
    check_size("pool2d", x, out)
    if out.size:
        g = np.asarray([x.shape[1], x.shape[2], x.shape[3], oh, ow, *element_strides(x)], np.int32)
        units = min(ROW_UNITS, 1 << (ow.bit_length() - 1))  # a power of two <= ow: few compiled variants
        inner = padding == (0, 0) and all((o - 1) * s + d * (k - 1) < n for o, s, d, k, n in
                                          zip((oh, ow), stride, dilation, kernel, x.shape[2:]))
        count, dim = cube.CubeCount(out.size // ow), cube.CubeDim(units)
        pool_kernel.launch(count, dim, x, out, g, float(divisor_override or 0), mode=mode, units=units, inner=inner,
                           T=f32 if t.is_float and t.itemsize < 4 else t, kernel=kernel, stride=stride,
                           padding=padding, dilation=dilation if mode != "avg" else (1, 1),
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
