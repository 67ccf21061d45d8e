"""`unfold` (im2col) and `fold` (col2im) for any number of spatial dims, PyTorch's layout.

`unfold` takes x (N, C, *size) to cols (N, C * K, L), K = prod(kernel) taps and L = prod(windows):
cols[n, c*K + k, l] = x[n, c, o_l * stride + k * dilation - padding] (k and l row-major over the
spatial dims; positions in the padding read 0). `fold` is its adjoint: out[n, c, p] sums every
cols[n, c*K + k, l] whose tap k of window l lands on p (no atomics: one unit per output element walks
the K taps and finds the one window, if any, that puts each tap on it).

One unit per output element (`common.position`: no bounds test). The spatial rank is comptime; sizes,
kernel, stride, padding, dilation, window counts and the input's strides travel in a runtime i32 array
(`geometry`), so one compiled kernel per (dtype, spatial rank) serves every shape and layout. f16/bf16
sums accumulate in f32.

Example:
    >>> x = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3)
    >>> unfold(x, (2, 2), (1, 1), (0, 0), (1, 1))[0, :, 0]      # the first 2x2 window
    array([0., 1., 3., 4.], dtype=float32)
"""

from __future__ import annotations

import math

import numpy as np

from .. import cube
from ..dtype import f32
from ..ops.spatial import conv_out_size
from .common import asarray, check_size, cube_dtype, empty, grid, position
from .layout import element_strides

# geometry = [C, K, L, size(S), kernel(S), stride(S), padding(S), dilation(S), windows(S), input strides]
SIZE, KERNEL, STRIDE, PADDING, DILATION, WINDOWS, STRIDES = range(7)


@cube.function
def field(g, which, d, S):
    """Entry `d` of the per-dim group `which` of geometry `g` (see the layout above)."""
    return g[3 + which * S + d]


@cube.kernel
def unfold_kernel(x: cube.Array, out: cube.Array, g: cube.Array[cube.i32], S: cube.Comptime[int],
                  shifted: cube.Comptime[bool]):
    """x is (N, C, *size), its strides in g after the groups; out is (N, C * K, L)."""
    i = position(len(out), shifted)
    if shifted or i < len(out):
        rest = i // g[2]
        tap, window, nc = rest % g[1], i % g[2], rest // g[1]
        off = (nc // g[0]) * field(g, STRIDES, 0, S) + (nc % g[0]) * field(g, STRIDES, 1, S)
        inside = True
        for d in cube.unroll(range(S - 1, -1, -1)):
            q = ((window % field(g, WINDOWS, d, S)) * field(g, STRIDE, d, S)
                 + (tap % field(g, KERNEL, d, S)) * field(g, DILATION, d, S) - field(g, PADDING, d, S))
            window = window // field(g, WINDOWS, d, S)
            tap = tap // field(g, KERNEL, d, S)
            inside = inside and q >= 0 and q < field(g, SIZE, d, S)
            off = off + cube.select(inside, q, 0) * field(g, STRIDES, 2 + d, S)
        v = x[off]
        out[i] = cube.select(inside, v, x.dtype(0))


@cube.kernel
def fold_kernel(cols: cube.Array, out: cube.Array, g: cube.Array[cube.i32], S: cube.Comptime[int],
                T: cube.Comptime, shifted: cube.Comptime[bool]):
    """cols is (N, C * K, L), its strides in g after the groups; out is (N, C, *size)."""
    i = position(len(out), shifted)
    if shifted or i < len(out):
        plane = cube.i32(1)
        for d in cube.unroll(range(S)):
            plane = plane * field(g, SIZE, d, S)
        nc = i // plane
        base = (nc // g[0]) * field(g, STRIDES, 0, S) + (nc % g[0]) * g[1] * field(g, STRIDES, 1, S)
        total = T(0)
        for k in range(g[1]):
            tap = k
            rest = i
            window = cube.i32(0)
            step = cube.i32(1)
            hit = True
            for d in cube.unroll(range(S - 1, -1, -1)):
                q = rest % field(g, SIZE, d, S) + field(g, PADDING, d, S) - (tap % field(g, KERNEL, d, S)) * field(g, DILATION, d, S)
                rest = rest // field(g, SIZE, d, S)
                tap = tap // field(g, KERNEL, d, S)
                o = q // field(g, STRIDE, d, S)
                hit = hit and q >= 0 and q % field(g, STRIDE, d, S) == 0 and o < field(g, WINDOWS, d, S)
                window = window + o * step
                step = step * field(g, WINDOWS, d, S)
            v = T(cols[base + k * field(g, STRIDES, 1, S) + cube.select(hit, window, 0) * field(g, STRIDES, 2, S)])
            total = total + cube.select(hit, v, T(0))
        out[i] = out.dtype(total)


def _geometry(source: np.ndarray, channels: int, size, kernel, stride, padding, dilation, windows) -> np.ndarray:
    return np.asarray([channels, math.prod(kernel), math.prod(windows), *size, *kernel, *stride, *padding,
                       *dilation, *windows, *element_strides(source)], np.int32)


def _windows(op: str, size, kernel, stride, padding, dilation) -> tuple:
    return tuple(conv_out_size(op, *a) for a in zip(size, kernel, stride, padding, dilation))


def unfold(x: np.ndarray, kernel, stride, padding, dilation) -> np.ndarray:
    """Sliding windows of `x` (N, C, *size) as columns (N, C * prod(kernel), L) (PyTorch's F.unfold).

    Example:
        >>> unfold(np.ones((2, 3, 5), np.float32), (2,), (1,), (0,), (1,)).shape
        (2, 6, 4)
    """
    x = asarray(x)
    size = x.shape[2:]
    windows = _windows("unfold", size, kernel, stride, padding, dilation)
    out = empty((x.shape[0], x.shape[1] * math.prod(kernel), math.prod(windows)), x.dtype, x)
    check_size("unfold", x, out)
    if out.size:
        count, dim = grid(out.size)
        geometry = _geometry(x, x.shape[1], size, kernel, stride, padding, dilation, windows)
        unfold_kernel.launch(count, dim, x, out, geometry, S=len(size), shifted=out.size >= dim.x)
    return out


def fold(cols: np.ndarray, output_size, kernel, stride, padding, dilation) -> np.ndarray:
    """The adjoint of `unfold`: columns (N, C * K, L) summed back into (N, C, *output_size) (F.fold).

    Example:
        >>> fold(np.ones((1, 4, 4), np.float32), (3, 3), (2, 2), (1, 1), (0, 0), (1, 1))[0, 0]
        array([[1., 2., 1.],
               [2., 4., 2.],
               [1., 2., 1.]], dtype=float32)
    """
    cols = asarray(cols)
    size = tuple(output_size)
    channels = cols.shape[1] // math.prod(kernel)
    windows = _windows("fold", size, kernel, stride, padding, dilation)
    out = empty((cols.shape[0], channels, *size), cols.dtype, cols)
    check_size("fold", cols, out)
    if out.size:
        t = cube_dtype(cols.dtype)
        count, dim = grid(out.size)
        geometry = _geometry(cols, channels, size, kernel, stride, padding, dilation, windows)
        fold_kernel.launch(count, dim, cols, out, geometry, S=len(size), T=f32 if t.is_float and t.itemsize < 4 else t,
                           shifted=out.size >= dim.x)
    return out
