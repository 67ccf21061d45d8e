"""2-D convolution as an implicit GEMM (no im2col buffer), NCHW, with stride, padding, dilation, groups.

Per sample n and group g the convolution is a matmul:
    out[n, g*Og + o, p] = sum_k  W[g*Og + o, k] * X_col[k, p]
with k = (c, kh, kw) over Cg * KH * KW and p = (oh, ow) over OH * OW, where
    X_col[(c, kh, kw), (oh, ow)] = x[n, g*Cg + c, oh*sh - ph + kh*dh, ow*sw - pw + kw*dw]   (0 outside).
The kernel is `matmul.py`'s tiling with X_col read on the fly: a cube owns `rows` output channels x
`units` output positions; each unit keeps `rows` accumulators. Inputs may have any strides; the
weight is read contiguously (the host makes it so), f16/bf16 accumulate in f32.

Example:
    >>> conv2d(np.ones((1, 1, 3, 3), np.float32), np.ones((1, 1, 2, 2), np.float32))
    array([[[[4., 4.],
             [4., 4.]]]], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from .. import cube
from ..dtype import f32
from ..errors import DTypeError, ShapeError
from .common import asarray, check_size, contiguous, cube_dtype, empty, zeros
from .layout import element_strides

ROWS, UNITS = 8, 64
# geometry layout: the host writes these i32 values in this order
GEOMETRY = ("C", "H", "W", "O", "KH", "KW", "OH", "OW", "sh", "sw", "ph", "pw", "dh", "dw", "groups",
            "sxn", "sxc", "sxh", "sxw")


@cube.function
def geo(g, name):
    return g[GEOMETRY.index(name)]


@cube.kernel
def conv2d_kernel(x: cube.Array, w: cube.Array, out: cube.Array, g: cube.Array[cube.i32],
                  T: cube.Comptime, rows: cube.Comptime[int], units: cube.Comptime[int]):
    groups = geo(g, "groups")
    og = geo(g, "O") // groups
    cg = geo(g, "C") // groups
    taps = geo(g, "KH") * geo(g, "KW")
    k = cg * taps
    positions = geo(g, "OH") * geo(g, "OW")
    z = cube.CUBE_POS_Z
    n = z // groups
    group = z % groups
    # Tiles at the far edges are shifted back inside (the host keeps og >= rows, positions >= units).
    o0 = cube.min(cube.CUBE_POS_Y * rows, og - rows)
    p = cube.min(cube.CUBE_POS_X * units, positions - units) + cube.UNIT_POS_X
    ih0 = (p // geo(g, "OW")) * geo(g, "sh") - geo(g, "ph")
    iw0 = (p % geo(g, "OW")) * geo(g, "sw") - geo(g, "pw")
    x_base = n * geo(g, "sxn") + group * cg * geo(g, "sxc")
    w_base = (group * og + o0) * k
    acc = tuple(T(0) for _ in range(rows))
    for kk in range(k):
        c = kk // taps
        kh = (kk % taps) // geo(g, "KW")
        kw = kk % geo(g, "KW")
        ih = ih0 + kh * geo(g, "dh")
        iw = iw0 + kw * geo(g, "dw")
        inside = ih >= 0 and ih < geo(g, "H") and iw >= 0 and iw < geo(g, "W")
        at = x_base + c * geo(g, "sxc") + cube.select(inside, ih * geo(g, "sxh") + iw * geo(g, "sxw"), 0)
        xv = cube.select(inside, T(x[at]), T(0))
        acc = tuple(acc[r] + T(w[w_base + r * k + kk]) * xv for r in range(rows))
    o_base = (n * geo(g, "O") + group * og + o0) * positions + p
    for r in cube.unroll(range(rows)):
        out[o_base + r * positions] = out.dtype(acc[r])


def _pair(v) -> tuple:
    return (v, v) if isinstance(v, int) else tuple(v)


def conv2d(x: np.ndarray, w: np.ndarray, stride=1, padding=0, dilation=1, groups: int = 1) -> np.ndarray:
    """Cross-correlation of x (N, C, H, W) with w (O, C/groups, KH, KW), PyTorch's conv2d.

    Output size per spatial dim: (n + 2p - d(k - 1) - 1) // s + 1.
    """
    x, w = asarray(x), asarray(w)
    if x.ndim != 4 or w.ndim != 4:
        raise ShapeError("conv2d", f"needs x (N, C, H, W) and w (O, C/groups, KH, KW), got {x.shape}, {w.shape}")
    if x.dtype != w.dtype or not cube_dtype(x.dtype).is_float:
        raise DTypeError(f"conv2d: needs float operands of one dtype, got {x.dtype} and {w.dtype}")
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    nb, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if groups < 1 or c % groups or o % groups or cg * groups != c:
        raise ShapeError("conv2d", f"input {x.shape} and weight {w.shape} do not fit groups={groups}")
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if oh <= 0 or ow <= 0:
        raise ShapeError("conv2d", f"the kernel {w.shape[2:]} does not fit the padded input {x.shape[2:]}")
    if cg == 0:
        return zeros((nb, o, oh, ow), x.dtype, x, w)
    out = empty((nb, o, oh, ow), x.dtype, x, w)
    check_size("conv2d", x, w, out)
    if out.size == 0:
        return out
    geometry = dict(C=c, H=h, W=wd, O=o, KH=kh, KW=kw, OH=oh, OW=ow, sh=sh, sw=sw, ph=ph, pw=pw, dh=dh,
                    dw=dw, groups=groups)
    geometry.update(zip(("sxn", "sxc", "sxh", "sxw"), element_strides(x)))
    g = np.asarray([geometry[k] for k in GEOMETRY], np.int32)
    t = cube_dtype(x.dtype)
    rows, units = min(ROWS, o // groups), min(UNITS, oh * ow)
    count = cube.CubeCount(-(-(oh * ow) // units), -(-(o // groups) // rows), nb * groups)
    conv2d_kernel.launch(count, cube.CubeDim(units), x, contiguous(w), out, g,
                         T=f32 if t.itemsize < 4 else t, rows=rows, units=units)
    return out
