"""2-D convolution, its transpose and its weight gradient as im2col/col2im kernels around the tuned matmul.

Each is a GEMM with the best matmul available (`tuned_matmul`: NumPy's BLAS or the cube kernel,
whichever the autotuner picked), fed by a cube kernel that copies the input windows:

    conv2d:            cols = im2col(x)            (N, G, Cg*KH*KW, OH*OW)
                       y    = W (G, Og, Cg*KH*KW) @ cols -> (N, O, OH*OW)  (one GEMM per sample)
    conv_transpose2d:  patches = W^T (G, Og*KH*KW, Cg) @ x (G, Cg, N*H*W), x copied channel first,
                    or, groups 1 on the host: patches = W^T @ x[n] per sample, x read in place
                       (`transpose_tuner` picks per shape class)
                       y = col2im(patches), cropped by `padding`        (a gather: no atomics)
    conv_weight_grad2d: cols = im2col(x) laid out (G, Cg*KH*KW, N*OH*OW)
                       dW = g (G, Og, N*OH*OW) @ cols^T                 (the batch folded into k)
                    or, groups 1 on the host: cols (N, C*KH*KW, OH*OW) batch first,
                       dW = sum_n g[n] (O, OH*OW) @ cols[n]^T           (g read in place)
                       (`weight_grad_tuner` picks; the batch-first columns are conv2d's own when its
                       input still lives, `_keep_columns`)

`im2col` writes each window element once; a batch whose columns would exceed `COLUMN_BYTES` is done in
slices. Layouts are PyTorch's (`ember/ops/conv.py`); f16/bf16 accumulate in f32. Design: docs/cube.md.

Example:
    >>> conv2d_gemm(np.ones((1, 1, 3, 3), np.float32), np.ones((1, 1, 2, 2), np.float32))
    array([[[[4., 4.],
             [4., 4.]]]], dtype=float32)
"""

from __future__ import annotations

import functools
import math
import weakref

import numpy as np

from .. import cube
from ..errors import DTypeError, ShapeError
from .common import asarray, check_size, contiguous, cube_dtype, empty, zeros
from .layout import element_strides
from .conv import _pair
from .elementwise import cast
from .matmul import TUNE_MIN_FLOPS, blas_mode, summed_matmul, tuned_matmul

UNITS = 128
COLUMN_BYTES = 256 << 20  # the most memory one im2col buffer may take
# The weight gradient's GEMM has a long k (batch x pixels) and a small output: split over rows or
# columns (the host BLAS's way) each thread packs all of k again; cut along k into K_PARTS batched GEMMs
# (when the batch divides, each part at least K_PART_MIN long) it packs each part once.
K_PARTS, K_PART_MIN = 4, 2048
_HOST_BLAS_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
UNROLL_TAPS = 25  # col2im unrolls kernels of at most this many taps (a compiled variant per kernel size)
# geometry layout: the host writes these i32 values in this order
GEOMETRY = ("N", "C", "H", "W", "KH", "KW", "OH", "OW", "sh", "sw", "ph", "pw", "dh", "dw",
            "sxn", "sxc", "sxh", "sxw", "s_n", "s_row")


@cube.function
def geo(g, name):
    return g[GEOMETRY.index(name)]


@cube.kernel
def im2col_kernel(x: cube.Array, cols: cube.Array, g: cube.Array[cube.i32], units: cube.Comptime[int],
                  unit_w: cube.Comptime[bool], exact: cube.Comptime[bool]):
    """cols[n*s_n + ((c*KH + kh)*KW + kw)*s_row + oh*OW + ow] = x[n, c, oh*sh + kh*dh, ow*sw + kw*dw] of an
    already padded x. A cube copies the window plane of one (n, c, kh, kw) row by row: units walk `ow`, reading
    contiguously when `unit_w` (stride 1 along a contiguous row)."""
    taps = geo(g, "KW") * geo(g, "KH")
    row = cube.CUBE_POS_Y  # (n, c, kh, kw)
    kw = row % geo(g, "KW")
    kh = (row // geo(g, "KW")) % geo(g, "KH")
    c = (row // taps) % geo(g, "C")
    n = row // (taps * geo(g, "C"))
    src = n * geo(g, "sxn") + c * geo(g, "sxc") + kh * geo(g, "dh") * geo(g, "sxh") + kw * geo(g, "dw") * geo(g, "sxw")
    dst = n * geo(g, "s_n") + (row % (taps * geo(g, "C"))) * geo(g, "s_row")
    step = 1 if unit_w else geo(g, "sw") * geo(g, "sxw")
    for oh in range(geo(g, "OH")):
        if exact:
            ow = cube.UNIT_POS_X
            cols[dst + oh * geo(g, "OW") + ow] = x[src + oh * geo(g, "sh") * geo(g, "sxh") + ow * step]
        else:
            for ow0 in range(0, geo(g, "OW"), units):
                ow = ow0 + cube.UNIT_POS_X
                if ow < geo(g, "OW"):
                    cols[dst + oh * geo(g, "OW") + ow] = x[src + oh * geo(g, "sh") * geo(g, "sxh") + ow * step]


@cube.kernel
def col2im_kernel(patches: cube.Array, out: cube.Array, g: cube.Array[cube.i32], units: cube.Comptime[int],
                  exact: cube.Comptime[bool], T: cube.Comptime, unit_stride: cube.Comptime[bool],
                  kernel: cube.Comptime[tuple]):
    """out[n, o, y, x] = sum over (kh, kw) of patches[n, o, kh, kw, iy, ix] where
    (y + ph) = iy*sh + kh*dh and (x + pw) = ix*sw + kw*dw; here H/W are the patches' input size and
    OH/OW the output's, C the output channels. The (n, o, kh, kw) plane of H*W patch values starts at
    n*s_n + ((o*KH + kh)*KW + kw)*s_row, so the GEMM's (O*KH*KW, N, H*W) result is read in place. A cube
    computes the plane of one (n, o) row by row; units walk `x`.

    With unit strides a tap's row of patch values is read whole, one vector of consecutive columns, and
    the columns outside the row are zeroed after the load: the load reads a few values of the neighbouring
    row, so a cube does it only when every such read stays inside `patches` (`inside`, all but the first
    and the last planes of a launch); the others test each column before it loads (a gather). The units
    then number a power of two (`_grid`). Reading whole rows is what makes the gather cheap
    (docs/cube.md, "Kernel figures")."""
    row = cube.CUBE_POS_Y  # (n, o)
    base = (row // geo(g, "C")) * geo(g, "s_n") + (row % geo(g, "C")) * geo(g, "KH") * geo(g, "KW") * geo(g, "s_row")
    # With unit strides: whether the farthest a tap's row read reaches, before the plane's start and past
    # its last tap row, stays inside `patches` (comptime False otherwise: nothing of it is traced).
    inside = unit_stride and base >= (geo(g, "KW") - 1) * geo(g, "dw") and (
        base + (geo(g, "KH") * geo(g, "KW") - 1) * geo(g, "s_row") + geo(g, "H") * geo(g, "W") + geo(g, "pw")
        + units <= len(patches))
    if inside:  # the same for every unit of the cube: a branch around the unit loops
        col2im_plane(patches, out, g, base, row, units, exact, T, True, kernel, True)
    else:
        col2im_plane(patches, out, g, base, row, units, exact, T, unit_stride, kernel, False)


@cube.function
def col2im_plane(patches, out, g, base, row, units, exact, T, unit_stride, kernel, whole_rows):
    """Output plane `row` = (n, o) of `col2im_kernel`, row by row."""
    for yo in range(geo(g, "OH")):
        o_row = (row * geo(g, "OH") + yo) * geo(g, "OW")
        if exact:
            xo = cube.UNIT_POS_X
            acc = col2im_pixel(patches, g, base, yo + geo(g, "ph"), xo + geo(g, "pw"), T, unit_stride, kernel,
                               whole_rows)
            out[o_row + xo] = out.dtype(acc)
        else:
            for x0 in range(0, geo(g, "OW"), units):
                xo = x0 + cube.UNIT_POS_X
                acc = col2im_pixel(patches, g, base, yo + geo(g, "ph"), xo + geo(g, "pw"), T, unit_stride, kernel,
                                   whole_rows)
                if xo < geo(g, "OW"):
                    out[o_row + xo] = out.dtype(acc)


@cube.function
def col2im_pixel(patches, g, base, yf, xf, T, unit_stride, kernel, whole_rows):
    """The sum of the patch values that land on full-output pixel (yf, xf) (see `col2im_kernel`);
    `unit_stride` (comptime: sh == sw == 1) drops the divisibility tests; a comptime `kernel` (KH, KW)
    unrolls the taps ((0, 0): loops over the geometry's)."""
    acc = T(0)
    if kernel[0] > 0:
        for kh in cube.unroll(range(kernel[0])):
            for kw in cube.unroll(range(kernel[1])):
                acc += col2im_tap(patches, g, base, yf, xf, kh, kw, T, unit_stride, whole_rows)
    else:
        for kh in range(geo(g, "KH")):
            for kw in range(geo(g, "KW")):
                acc += col2im_tap(patches, g, base, yf, xf, kh, kw, T, unit_stride, whole_rows)
    return acc


@cube.function
def col2im_tap(patches, g, base, yf, xf, kh, kw, T, unit_stride, whole_rows):
    """The patch value of tap (kh, kw) that lands on full-output pixel (yf, xf), or 0 when none does.
    `whole_rows` (comptime, unit strides, the plane `inside`): an unconditional load of consecutive columns
    (its row clamped into the plane), zeroed where it reads no tap of this pixel."""
    ty = yf - kh * geo(g, "dh")
    iy = ty if unit_stride else ty // geo(g, "sh")
    ok_y = ty >= 0 and iy < geo(g, "H") if unit_stride else ty >= 0 and ty % geo(g, "sh") == 0 and iy < geo(g, "H")
    tx = xf - kw * geo(g, "dw")
    ix = tx if unit_stride else tx // geo(g, "sw")
    ok_x = tx >= 0 and ix < geo(g, "W") if unit_stride else tx >= 0 and tx % geo(g, "sw") == 0 and ix < geo(g, "W")
    ok = ok_y and ok_x
    plane = base + (kh * geo(g, "KW") + kw) * geo(g, "s_row")
    if whole_rows:
        return cube.select(ok, T(patches[plane + cube.max(cube.min(iy, geo(g, "H") - 1), 0) * geo(g, "W") + ix]),
                           T(0))
    return cube.select(ok, T(patches[plane + cube.select(ok, iy * geo(g, "W") + ix, 0)]), T(0))


def _geometry(**values) -> np.ndarray:
    return np.asarray([values.get(k, 0) for k in GEOMETRY], np.int32)


def _grid(out_cols: int, planes: int, power_of_two: bool = False) -> tuple:
    """One cube per output plane; its units walk the columns, one unit per column when they fit in
    `UNITS` (`exact`: no masked tail, masked stores are slow on some CPUs), else `UNITS` at a time.
    `power_of_two`: as many units as the next power of two (a masked tail rather than a loop of an odd
    width: gcc runs the lanes past its last full vector one at a time)."""
    units = min(UNITS, 1 << (out_cols - 1).bit_length() if power_of_two else out_cols)
    return cube.CubeCount(1, planes), cube.CubeDim(units), units, units == out_cols


def im2col(x: np.ndarray, kernel: tuple, stride, padding, dilation, out_size: tuple,
           batch_major: bool = True) -> np.ndarray:
    """The windows of x (N, C, H, W) as columns: (N, C*KH*KW, OH*OW) when `batch_major`, else
    (C*KH*KW, N, OH*OW) (the batch folded into the GEMM's k for the weight gradient).

    Example:
        >>> im2col(np.arange(4.0).reshape(1, 1, 2, 2), (2, 2), 1, 0, 1, (1, 1)).ravel()
        array([0., 1., 2., 3.])
    """
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, _pair(stride), _pair(padding), _pair(dilation)
    nb, c, h, wd = x.shape
    oh, ow = out_size
    rows, positions = c * kh * kw, oh * ow
    shape = (nb, rows, positions) if batch_major else (rows, nb, positions)
    cols = empty(shape, x.dtype, x)
    check_size("im2col", x, cols)
    if cols.size == 0:
        return cols
    if ph or pw:  # one padded copy, so that the kernel reads without bounds checks
        padded = zeros((nb, c, h + 2 * ph, wd + 2 * pw), x.dtype, x)
        padded[:, :, ph:ph + h, pw:pw + wd] = x
        x = padded
    s_n, s_row = (rows * positions, positions) if batch_major else (positions, nb * positions)
    sxn, sxc, sxh, sxw = element_strides(x)
    g = _geometry(N=nb, C=c, KH=kh, KW=kw, OH=oh, OW=ow, sh=sh, sw=sw, dh=dh, dw=dw, sxn=sxn, sxc=sxc, sxh=sxh,
                  sxw=sxw, s_n=s_n, s_row=s_row)
    count, dim, units, exact = _grid(ow, nb * rows)
    im2col_kernel.launch(count, dim, x, cols, g, units=units, unit_w=sw == 1 and sxw == 1, exact=exact)
    return cols


def _check(op: str, x, w, groups: int) -> None:
    if x.ndim != 4 or w.ndim != 4:
        raise ShapeError(op, f"needs 4-D input and weight (N, C, H, W), got {x.shape} and {w.shape}")
    if x.dtype != w.dtype or not cube_dtype(x.dtype).is_float:
        raise DTypeError(f"{op}: needs float operands of one dtype, got {x.dtype} and {w.dtype}")
    if groups < 1 or x.shape[1] % groups:
        raise ShapeError(op, f"groups={groups} must divide the input channels of {x.shape}")


def _out_size(op: str, size, kernel, stride, padding, dilation) -> tuple:
    out = tuple((n + 2 * p - d * (k - 1) - 1) // s + 1
                for n, k, s, p, d in zip(size, kernel, _pair(stride), _pair(padding), _pair(dilation)))
    if min(out) <= 0:
        raise ShapeError(op, f"the kernel {tuple(kernel)} does not fit the padded input {tuple(size)}")
    return out


def conv2d_gemm(x: np.ndarray, w: np.ndarray, stride=1, padding=0, dilation=1, groups: int = 1) -> np.ndarray:
    """PyTorch's conv2d (cross-correlation) of x (N, C, H, W) with w (O, C/groups, KH, KW), as im2col and
    the tuned matmul. Output size per spatial dim: (n + 2p - d(k - 1) - 1) // s + 1.

    Example:
        >>> conv2d_gemm(np.ones((2, 4, 5, 5), np.float32), np.ones((6, 2, 3, 3), np.float32), groups=2).shape
        (2, 6, 3, 3)
    """
    x, w = asarray(x), asarray(w)
    _check("conv2d", x, w, groups)
    nb, c = x.shape[:2]
    o, cg = w.shape[:2]
    if o % groups or cg * groups != c:
        raise ShapeError("conv2d", f"input {x.shape} and weight {w.shape} do not fit groups={groups}")
    oh, ow = _out_size("conv2d", x.shape[2:], w.shape[2:], stride, padding, dilation)
    if cg == 0 or nb == 0 or o == 0:
        return zeros((nb, o, oh, ow), x.dtype, x)
    # (Og, K) or (G, Og, K) against the columns (n, K, P) or (n, G, K, P): one GEMM per sample (and group)
    # writes the output batch first, with no copy after it. The host BLAS spreads the batch over its
    # threads, as fast here as one GEMM over the whole batch with a transposing copy of its result.
    weights = w.reshape(o, -1) if groups == 1 else w.reshape(groups, o // groups, -1)
    step = max(1, COLUMN_BYTES // (c * w.shape[2] * w.shape[3] * oh * ow * x.itemsize))
    parts = []
    for n0 in range(0, nb, step):  # one part unless the columns would be too large
        cols = im2col(x[n0:n0 + step], w.shape[2:], stride, padding, dilation, (oh, ow))  # (n, K, P)
        n = cols.shape[0]
        shape = (n, -1, oh * ow) if groups == 1 else (n, groups, -1, oh * ow)
        parts.append(tuned_matmul(weights, cols.reshape(shape)))
    if len(parts) == 1 and groups == 1:
        _keep_columns(x, (w.shape[2:], stride, padding, dilation, (oh, ow)), cols)
    out = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return out.reshape(nb, o, oh, ow)


KEPT_COLUMN_BYTES = 64 << 20
"""The most memory the host keeps in forward columns for the weight gradients (`_keep_columns`)."""
_kept: dict[int, tuple] = {}  # id(x) -> (weak reference to x, geometry, its batch-first columns), oldest first


def _keep_columns(x, geometry: tuple, cols) -> None:
    """Keep the batch-first columns conv2d made of the host array `x` while `x` lives (a training step's
    autodiff keeps it for the weight gradient), so that `_weight_grad_per_sample` does not make them
    again; at most `KEPT_COLUMN_BYTES`, oldest dropped first.
    Arrays are never written after they are made, so the columns of a live `x` stay its columns."""
    if type(x) is not np.ndarray or cols.nbytes > KEPT_COLUMN_BYTES:
        return
    entries = list(_kept.items())  # a snapshot: an x dying on another thread drops its entry meanwhile
    total = sum(entry[2].nbytes for _, entry in entries)
    for key, entry in entries:  # oldest first
        if total + cols.nbytes <= KEPT_COLUMN_BYTES:
            break
        if _kept.pop(key, None) is not None:
            total -= entry[2].nbytes
    key = id(x)
    _kept.pop(key, None)
    _kept[key] = (weakref.ref(x, lambda _, key=key: _kept.pop(key, None)), _normal(geometry), cols)


def _kept_columns(x, geometry: tuple):
    """The columns `_keep_columns` kept of this very `x` with this geometry, or None."""
    entry = _kept.get(id(x))
    if entry is not None and entry[0]() is x and entry[1] == _normal(geometry):
        return entry[2]
    return None


def _normal(geometry: tuple) -> tuple:
    kernel, stride, padding, dilation, out = geometry
    return tuple(kernel), _pair(stride), _pair(padding), _pair(dilation), tuple(out)


def conv_transpose2d(x: np.ndarray, w: np.ndarray, stride=1, padding=0, output_padding=0, dilation=1,
                     groups: int = 1) -> np.ndarray:
    """PyTorch's conv_transpose2d of x (N, C, H, W) with w (C, O/groups, KH, KW): the adjoint of conv2d.
    Output size per spatial dim: (h - 1)s - 2p + d(k - 1) + 1 + output_padding (any output_padding that
    leaves it positive, as the primitive allows).

    Example:
        >>> conv_transpose2d(np.ones((1, 1, 2, 2), np.float32), np.ones((1, 1, 2, 2), np.float32), 2).shape
        (1, 1, 4, 4)
    """
    x, w = asarray(x), asarray(w)
    _check("conv_transpose2d", x, w, groups)
    nb, c, h, wd = x.shape
    if w.shape[0] != c:
        raise ShapeError("conv_transpose2d", f"input {x.shape} has {c} channels but weight {w.shape} expects "
                                             f"{w.shape[0]}")
    og, kh, kw = w.shape[1:]
    o, cg = og * groups, c // groups
    (sh, sw), (ph, pw), (eh, ew), (dh, dw) = (_pair(v) for v in (stride, padding, output_padding, dilation))
    oh, ow = (h - 1) * sh - 2 * ph + dh * (kh - 1) + 1 + eh, (wd - 1) * sw - 2 * pw + dw * (kw - 1) + 1 + ew
    if oh <= 0 or ow <= 0:
        raise ShapeError("conv_transpose2d", f"input {x.shape} with weight {w.shape} gives an empty output "
                                             f"{(oh, ow)}")
    if cg == 0 or h * wd == 0:
        return zeros((nb, o, oh, ow), x.dtype, x)
    if nb * o * oh * ow == 0:
        return empty((nb, o, oh, ow), x.dtype, x)
    plan = (groups, (sh, sw), (ph, pw), (dh, dw), (oh, ow))
    if groups == 1 and isinstance(x, np.ndarray) and x.dtype in _HOST_BLAS_DTYPES:
        return transpose_tuner()(x, w, plan)
    return _transpose_channel_first(x, w, plan)


def _transpose_channel_first(x, w, plan: tuple):
    """patches = W^T (G, Og*KH*KW, Cg) @ x (G, Cg, N*H*W): one GEMM per group over the whole batch, after
    one copy of the pixels channel first; patches (G, Og*KH*KW, N*H*W) in memory."""
    groups = plan[0]
    nb, c, h, wd = x.shape
    og, kh, kw = w.shape[1:]
    cg = c // groups
    weights_t = w.reshape(groups, cg, og * kh * kw).transpose(0, 2, 1)  # (G, Og*KH*KW, Cg), a view
    pixels = cast(x.reshape(nb, groups, cg, h * wd).transpose(1, 2, 0, 3), x.dtype)  # (G, Cg, N, H*W)
    patches = tuned_matmul(weights_t, pixels.reshape(groups, cg, nb * h * wd))
    return _col2im(patches, x, w, plan, s_n=h * wd, s_row=nb * h * wd)


def _transpose_batch_first(x, w, plan: tuple):
    """(groups 1) patches = W^T (O*KH*KW, C) @ x[n] (C, H*W) for each sample, x read in place; patches
    (N, O*KH*KW, H*W) in memory."""
    nb, c, h, wd = x.shape
    rows = w.shape[1] * w.shape[2] * w.shape[3]
    patches = tuned_matmul(w.reshape(c, rows).T, x.reshape(nb, c, h * wd))
    return _col2im(patches, x, w, plan, s_n=rows * h * wd, s_row=h * wd)


def _col2im(patches, x, w, plan: tuple, s_n: int, s_row: int) -> np.ndarray:
    """The output of conv_transpose2d gathered from `patches` (row o*KH*KW + tap of sample n, pixel p at
    n * s_n + row * s_row + p), cropped by the padding."""
    groups, (sh, sw), (ph, pw), (dh, dw), (oh, ow) = plan
    nb, _, h, wd = x.shape
    og, kh, kw = w.shape[1:]
    o = og * groups
    out = empty((nb, o, oh, ow), x.dtype, x)
    check_size("conv_transpose2d", x, w, out)
    g = _geometry(N=nb, C=o, H=h, W=wd, KH=kh, KW=kw, OH=oh, OW=ow, sh=sh, sw=sw, ph=ph, pw=pw, dh=dh, dw=dw,
                  s_n=s_n, s_row=s_row)
    count, dim, units, exact = _grid(ow, nb * o, power_of_two=sh == 1 and sw == 1)
    t = cube_dtype(x.dtype)
    col2im_kernel.launch(count, dim, contiguous(patches), out, g, units=units, exact=exact,
                         T=cube.f32 if t.itemsize < 4 else t, unit_stride=sh == 1 and sw == 1,
                         kernel=(kh, kw) if kh * kw <= UNROLL_TAPS else (0, 0))
    return out


@functools.cache
def transpose_tuner():
    """The process's `Autotuner` over the two layouts of conv_transpose2d's patches (groups 1, host): channel
    first (the pixels copied, one GEMM over the batch) or batch first (x read in place, a GEMM per sample),
    per shape class (batch, in channels, out channels x taps, pixels; cached per CPU model). Neither wins
    everywhere: where the batch is large and the GEMMs small, the per-sample GEMMs cost more than the copy
    (docs/cube.md, "Kernel figures").

    Example:
        >>> transpose_tuner().choose(x, w, plan) in ("channel_first", "batch_first")
        True
    """
    from ..cube.runtime.autotune import Autotuner, anchor, device_cache

    def key(x, w, plan) -> tuple:
        return (anchor(x.shape[0]), anchor(x.shape[1]), anchor(w.shape[1] * w.shape[2] * w.shape[3]),
                anchor(x.shape[2] * x.shape[3]), str(x.dtype), blas_mode())
    return Autotuner(
        "conv_transpose", {"channel_first": _transpose_channel_first, "batch_first": _transpose_batch_first},
        key, cache=device_cache("cpu"),
        worth=lambda x, w, plan: x.shape[0] > 1 and 2 * x.size * w.shape[1] * w.shape[2] * w.shape[3]
        >= TUNE_MIN_FLOPS)


def conv_weight_grad2d(x: np.ndarray, grad: np.ndarray, kernel, stride=1, padding=0, dilation=1,
                       groups: int = 1) -> np.ndarray:
    """The gradient of conv2d's weight: dW (O, C/groups, KH, KW) from the input x (N, C, H, W) and the
    output gradient grad (N, O, GH, GW). grad may cover only the leading outputs (the rest count as
    zero), as the primitive `conv_weight_grad` allows.

    Example:
        >>> conv_weight_grad2d(np.ones((1, 1, 3, 3), np.float32), np.ones((1, 1, 2, 2), np.float32), (2, 2))
        array([[[[4., 4.],
                 [4., 4.]]]], dtype=float32)
    """
    x, grad = asarray(x), asarray(grad)
    _check("conv_weight_grad2d", x, grad, groups)
    kh, kw = _pair(kernel)
    nb, c = x.shape[:2]
    o, gh, gw = grad.shape[1:]
    full = _out_size("conv_weight_grad2d", x.shape[2:], (kh, kw), stride, padding, dilation)
    if grad.shape[0] != nb or o % groups or gh > full[0] or gw > full[1]:
        raise ShapeError("conv_weight_grad2d", f"output gradient {grad.shape} does not fit input {x.shape} "
                                               f"(full output {full}, groups={groups})")
    cg = c // groups
    if o == 0 or cg == 0 or nb * gh * gw == 0:
        return zeros((o, cg, kh, kw), x.dtype, x)
    geometry = ((kh, kw), stride, padding, dilation, (gh, gw))
    if groups == 1 and isinstance(x, np.ndarray) and isinstance(grad, np.ndarray) and x.dtype in _HOST_BLAS_DTYPES:
        return weight_grad_tuner()(x, grad, geometry)
    return _weight_grad_folded(x, grad, geometry, groups)


def _weight_grad_folded(x, grad, geometry: tuple, groups: int = 1):
    """dW with the batch folded into the GEMM's k: columns (G, Cg*KH*KW, N*P) from `im2col` and the output
    gradient copied to (G, Og, N*P), one long GEMM (cut into K_PARTS batched ones on the host BLAS)."""
    kernel, stride, padding, dilation, (gh, gw) = geometry
    (kh, kw), nb, c, o = kernel, x.shape[0], x.shape[1], grad.shape[1]
    cg = c // groups
    cols = im2col(x, kernel, stride, padding, dilation, (gh, gw), batch_major=False)  # (C*KH*KW, N, P)
    cols = cols.reshape(groups, cg * kh * kw, nb * gh * gw)
    # (O, N, P) as one contiguous copy: the batch folded into the GEMM's k, like the columns.
    grads = cast(grad.reshape(nb, o, gh * gw).transpose(1, 0, 2), grad.dtype).reshape(groups, o // groups, -1)
    parts = next(p for p in (K_PARTS, 2, 1) if nb % p == 0) if x.dtype in _HOST_BLAS_DTYPES else 1
    if isinstance(x, np.ndarray) and parts > 1 and cols.shape[-1] >= K_PART_MIN * parts:
        # the batch cut into `parts` GEMMs of a batched call (one per thread and more), summed after
        split = lambda a: a.reshape(groups, a.shape[1], parts, -1).transpose(2, 0, 1, 3)  # noqa: E731
        return np.add.reduce(tuned_matmul(split(grads), split(cols).transpose(0, 1, 3, 2)), 0).reshape(o, cg, kh, kw)
    dw = tuned_matmul(grads, cols.transpose(0, 2, 1))  # (G, Og, Cg*KH*KW)
    return dw.reshape(o, cg, kh, kw)


def _weight_grad_per_sample(x, grad, geometry: tuple):
    """dW (groups 1) as one GEMM per sample, summed: grad (N, O, P) read in place against the batch-first
    columns (N, C*KH*KW, P). No copy of the gradient, and short GEMMs: faster where C*KH*KW is small,
    slower where the long folded GEMM pays (`weight_grad_tuner` picks).

    Each sample's product is dW^T = columns @ grad^T (C*KH*KW rows), transposed once after the sum: the
    orientation OpenBLAS runs best here (docs/cube.md, "Kernel figures")."""
    kernel, stride, padding, dilation, (gh, gw) = geometry
    nb, c, o = x.shape[0], x.shape[1], grad.shape[1]
    cols = _kept_columns(x, geometry)
    if cols is None:
        cols = im2col(x, kernel, stride, padding, dilation, (gh, gw))  # (N, C*KH*KW, P)
    g = contiguous(grad).reshape(nb, o, gh * gw)
    dw_t = summed_matmul(cols, g.transpose(0, 2, 1))  # (C*KH*KW, O), the products summed as they are made
    return np.ascontiguousarray(dw_t.T).reshape((o, c) + tuple(kernel))


@functools.cache
def weight_grad_tuner():
    """The process's `Autotuner` over the two ways to compute a (groups 1, host) weight gradient, per shape
    class (batch, out channels, C*KH*KW, positions, `blas_mode`; cached per CPU model). It times them where a training
    step first meets the class, in its backward pass, so the per-sample way is timed with the forward's
    columns kept, as it runs there at every later step.

    Example:
        >>> weight_grad_tuner().choose(x, grad, ((3, 3), 1, 1, 1, (28, 28)))
        'per_sample'
    """
    from ..cube.runtime.autotune import Autotuner, anchor, device_cache

    def key(x, grad, geometry) -> tuple:
        kernel, (gh, gw) = geometry[0], geometry[4]
        return (anchor(x.shape[0]), anchor(grad.shape[1]), anchor(x.shape[1] * kernel[0] * kernel[1]),
                anchor(gh * gw), str(x.dtype), blas_mode())
    return Autotuner(
        "conv_weight_grad", {"folded": _weight_grad_folded, "per_sample": _weight_grad_per_sample}, key,
        cache=device_cache("cpu"),
        worth=lambda x, grad, geometry: x.shape[0] > 1 and 2 * grad.size * x.shape[1] * math.prod(geometry[0])
        >= TUNE_MIN_FLOPS)
