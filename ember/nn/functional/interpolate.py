"""`interpolate`: resizing by nearest, (bi/tri)linear, bicubic or area sampling, PyTorch's rules.

Every mode is separable, so each spatial dim is resized on its own. A dim of input length n and output
length m is resampled with a few taps per output element: y[i] = sum_t w_t[i] * x[idx_t[i]], each tap an
`index_select` (whose gradient is an `index_add`) times a constant weight. For output element i, with
scale = n/m (or 1/scale_factor when one is given and not recomputed):

- nearest: idx = min(floor(i * scale), n - 1) (computed in float32, as PyTorch does);
  nearest-exact: idx = min(floor((i + 0.5) * scale), n - 1).
- linear: source x = (i + 0.5) * scale - 0.5 clamped at 0, or with align_corners x = i * (n-1)/(m-1);
  taps floor(x) and floor(x) + 1 (clamped) with weights 1 - t and t, t = x - floor(x).
- cubic: the same source x (not clamped), taps floor(x) - 1 .. floor(x) + 2 (clamped to the edge) with
  Keys' cubic convolution weights, A = -0.75.
- area: adaptive average pooling.

Example:
    >>> interpolate(ember.randn(1, 3, 8, 8), scale_factor=2, mode="bilinear").shape
    (1, 3, 16, 16)
"""

from __future__ import annotations

import math

import numpy as np

from ...api.creation import from_numpy
from ...errors import DTypeError, ShapeError
from ...tensor import Tensor
from .adaptive import adaptive_avg_pool

CUBIC_A = -0.75
# mode -> the spatial dims it is defined for (PyTorch's table)
MODES = {"nearest": (1, 2, 3), "nearest-exact": (1, 2, 3), "area": (1, 2, 3), "linear": (1,),
         "bilinear": (2,), "bicubic": (2,), "trilinear": (3,)}


def _sizes(x: Tensor, nd: int, size, scale_factor, recompute_scale_factor) -> tuple[tuple[int, ...], tuple]:
    """Output sizes, and the scales the sampling rules see (None: use n / m)."""
    if (size is None) == (scale_factor is None):
        raise ShapeError("interpolate", "give exactly one of size and scale_factor")
    if size is not None:
        sizes = (size,) * nd if isinstance(size, int) else tuple(size)
        if len(sizes) != nd or any(not isinstance(m, int) or m < 1 for m in sizes):
            raise ShapeError("interpolate", f"size must be a positive int or {nd} of them for input of shape "
                                            f"{x.shape}, got {size!r}")
        if recompute_scale_factor:
            raise ShapeError("interpolate", "recompute_scale_factor needs scale_factor, not size")
        return sizes, (None,) * nd
    scales = (float(scale_factor),) * nd if isinstance(scale_factor, (int, float)) else tuple(map(float, scale_factor))
    if len(scales) != nd or any(s <= 0 for s in scales):
        raise ShapeError("interpolate", f"scale_factor must be a positive number or {nd} of them for input of "
                                        f"shape {x.shape}, got {scale_factor!r}")
    sizes = tuple(math.floor(n * s) for n, s in zip(x.shape[2:], scales))
    if any(m < 1 for m in sizes):
        raise ShapeError("interpolate", f"scale_factor {scale_factor!r} makes an empty output from {x.shape}")
    return sizes, (None,) * nd if recompute_scale_factor else scales


def _ratio(n: int, m: int, scale, align_corners: bool, acc) -> float:
    """PyTorch's `area_pixel_compute_scale`: source pixels per output pixel."""
    if align_corners:
        return acc.type((n - 1) / (m - 1)) if m > 1 else acc.type(0)
    return acc.type(1.0 / scale) if scale is not None else acc.type(n) / acc.type(m)


def _taps(mode: str, n: int, m: int, scale, align_corners: bool, acc: np.dtype):
    """[(indices, weights or None)] whose weighted sum resamples a dim of n elements to m."""
    i = np.arange(m)
    if mode in ("nearest", "nearest-exact"):
        ratio = np.float32(1.0 / scale) if scale is not None else np.float32(n) / np.float32(m)
        offset = np.float32(0.5 if mode == "nearest-exact" else 0.0)
        return [(np.minimum(np.floor((i.astype(np.float32) + offset) * ratio).astype(np.int64), n - 1), None)]
    ratio = _ratio(n, m, scale, align_corners, acc)
    cubic = mode == "bicubic"
    src = i.astype(acc) * ratio if align_corners else (i.astype(acc) + acc.type(0.5)) * ratio - acc.type(0.5)
    if not cubic and not align_corners:
        src = np.maximum(src, 0)
    base = np.minimum(np.floor(src).astype(np.int64), n - 1)
    t = np.clip(src - base, 0, 1).astype(acc)
    if not cubic:
        return [(base, 1 - t), (np.minimum(base + 1, n - 1), t)]
    a = acc.type(CUBIC_A)

    def near(d):  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    weights = [far(t + 1), near(t), near(1 - t), far(2 - t)]
    return [(np.clip(base - 1 + j, 0, n - 1), w) for j, w in enumerate(weights)]


def _resample(x: Tensor, dim: int, taps) -> Tensor:
    shape = (-1,) + (1,) * (x.ndim - 1 - dim)
    out = None
    for index, weight in taps:
        term = x.index_select(dim, from_numpy(index, device=x.device))
        if weight is not None:
            term = term * from_numpy(weight.reshape(shape).astype(x.dtype.np), device=x.device)
        out = term if out is None else out + term
    return out


def interpolate(input: Tensor, size=None, scale_factor=None, mode: str = "nearest", align_corners: bool | None = None,
                recompute_scale_factor: bool | None = None) -> Tensor:
    """Resize the spatial dims of (N, C, *spatial) (see the module docs for each mode's math).

    Args:
        input: (N, C, L), (N, C, H, W) or (N, C, D, H, W).
        size: the output spatial size, an int or one per dim.
        scale_factor: or a multiplier per dim; the output size is floor(n * scale_factor).
        mode: "nearest", "nearest-exact", "linear" (3-d input), "bilinear", "bicubic" (4-d),
            "trilinear" (5-d) or "area".
        align_corners: for the linear and cubic modes, map the corner pixels' centers onto each other
            (True) or the corner pixels' edges (False, the default).
        recompute_scale_factor: with scale_factor, sample at n / m instead of 1 / scale_factor.

    Example:
        >>> interpolate(ember.tensor([[[1.0, 2.0]]]), size=4, mode="linear", align_corners=True).tolist()
        [[[1.0, 1.3333332538604736, 1.6666667461395264, 2.0]]]
    """
    if mode not in MODES:
        raise ShapeError("interpolate", f"unknown mode {mode!r}; known: {sorted(MODES)}")
    nd = input.ndim - 2
    if nd not in MODES[mode]:
        wants = " or ".join(f"{d + 2}-d" for d in MODES[mode])
        raise ShapeError("interpolate", f"mode {mode!r} needs a {wants} input, got shape {input.shape}")
    smooth = mode in ("linear", "bilinear", "bicubic", "trilinear")
    if align_corners is not None and not smooth:
        raise ShapeError("interpolate", "align_corners can only be set with the linear, bilinear, bicubic and "
                                        "trilinear modes")
    sizes, scales = _sizes(input, nd, size, scale_factor, recompute_scale_factor)
    if mode == "area":
        return adaptive_avg_pool(input, sizes, nd=nd, op="interpolate")
    if not input.dtype.is_float and mode != "nearest" and mode != "nearest-exact":
        raise DTypeError(f"interpolate: mode {mode!r} needs a floating-point input, got {input.dtype}")
    acc = np.dtype(np.float64) if input.dtype.np == np.float64 else np.dtype(np.float32)
    y = input
    for axis, (m, scale) in enumerate(zip(sizes, scales)):
        dim = 2 + axis
        n = input.shape[dim]
        if mode == "nearest" and m == n:
            continue
        y = _resample(y, dim, _taps(mode, n, m, scale, bool(align_corners), acc))
    return y
