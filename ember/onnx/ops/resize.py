"""Resize and Upsample: separable interpolation, one axis at a time, with ONNX's coordinate modes.

For each resized axis the taps (source indices) and their weights are computed on the host from the
sizes alone (as ONNX's reference does: nearest, linear, cubic, antialias, exclude_outside,
tf_crop_and_resize's extrapolation); on the device the axis is a gather of the taps and a weighted
sum, so it runs, fuses and differentiates on every device. Nearest is a pure gather.

Example:
    >>> OPS[("", "Resize")](call, x, None, scales)   # mode, coordinate mode from the node
"""

from __future__ import annotations

import numpy as np

from ...api import math as M
from ...api import reduce as R
from ...api.index import index_select
from .registry import op


def _nearest(mode):
    def coeffs(ratio, scale):
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        up = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5, "floor": False,
              "ceil": True}[mode]
        return np.array([0.0, 1.0]) if up else np.array([1.0, 0.0])
    return coeffs


def _linear(ratio, scale):
    return np.array([1 - ratio, ratio])


def _linear_aa(ratio, scale):
    scale = min(scale, 1.0)
    start = int(np.floor(-1 / scale) + 1)
    args = (np.arange(start, start + 2 - 2 * start) - ratio) * scale
    c = np.clip(1 - np.abs(args), 0, 1)
    return c / c.sum()


def _cubic(a, antialias):
    def kernel(x):
        x = abs(x)
        if x <= 1:
            return (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1
        return a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a if x < 2 else 0.0

    def coeffs(ratio, scale):
        if not antialias:
            return np.array([kernel(ratio + 1), kernel(ratio), kernel(1 - ratio), kernel(2 - ratio)])
        s = min(scale, 1.0)
        start = int(np.floor(-2 / s) + 1)
        c = np.array([kernel(s * (i - ratio)) for i in range(start, 2 - start)])
        return c / c.sum()
    return coeffs


def _source(mode, y, scale, n, out, roi):
    length = scale * n
    if mode == "align_corners":
        return np.zeros(out) if length == 1 else y * (n - 1) / (length - 1)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_crop_and_resize":
        x = np.full(out, (roi[1] - roi[0]) * (n - 1) / 2) if length == 1 else y * (roi[1] - roi[0]) * (n - 1) / (length - 1)
        return x + roi[0] * (n - 1)
    if mode == "pytorch_half_pixel":
        return np.full(out, -0.5) if length == 1 else (y + 0.5) / scale - 0.5
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        return n / 2 * (1 - out / length) + (y + 0.5) / scale - 0.5
    if mode == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale
    raise KeyError(mode)


def taps(n: int, out: int, scale: float, coeffs, mode: str, roi, exclude_outside: bool):
    """(indices (out, k), weights (out, k), extrapolated (out,) or None) of one axis."""
    y = np.arange(out, dtype=np.float64)
    x = _source(mode, y, scale, n, out, roi)
    floor = np.floor(x)
    ratios = np.where(x == floor, 1.0, x - floor)
    w = np.stack([coeffs(float(r), scale) for r in ratios]) if out else np.zeros((0, 2))
    k = w.shape[1]
    pad = int(np.ceil(k / 2))
    xp = x + pad
    p = np.floor(xp).astype(np.int64)
    frac = xp - p
    if k % 2 == 0:
        offset = np.where(frac == 0, -(k // 2), -(k // 2) + 1)
    else:
        offset = np.where(frac <= 0.5, -((k - 1) // 2), -((k - 1) // 2) + 1)
    index = (p + offset)[:, None] + np.arange(k)[None, :] - pad
    if exclude_outside:
        w = np.where((index < 0) | (index >= n), 0.0, w)
        total = w.sum(-1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    extrapolated = ((x < 0) | (x > n - 1)) if mode == "tf_crop_and_resize" else None
    return np.clip(index, 0, n - 1), w, extrapolated


def resize_axis(call, x, axis: int, out: int, scale: float, coeffs, mode: str, roi, nearest: bool,
                exclude_outside: bool = False, extrapolation: float = 0.0):
    index, w, extrapolated = taps(x.shape[axis], out, scale, coeffs, mode, roi, exclude_outside)
    if nearest:
        pick = index[np.arange(out), np.argmax(w, -1)] if out else np.zeros(0, np.int64)
        y = index_select(x, axis, call.const(pick.astype(np.int64)))
    else:
        k = index.shape[1]
        g = index_select(x, axis, call.const(index.reshape(-1).astype(np.int64)))
        g = g.reshape(*x.shape[:axis], out, k, *x.shape[axis + 1:])
        weights = call.const(w.reshape(out, k, *[1] * (x.ndim - axis - 1))).cast(x.dtype if x.dtype.is_float else w.dtype)
        y = R.sum(g * weights, axis + 1)
        if not x.dtype.is_float:
            y = M.round(y).cast(x.dtype)
    if extrapolated is not None and extrapolated.any():
        mask = call.const(extrapolated.reshape(out, *[1] * (x.ndim - axis - 1)))
        y = M.where(mask, extrapolation, y).cast(x.dtype)
    return y


@op("Resize")
def resize(call, x, roi=None, scales=None, sizes=None):
    if call.opset < 11:
        scales, roi, sizes = roi, None, None
    mode = call.attr("mode", "nearest")
    ct = call.attr("coordinate_transformation_mode", "half_pixel") if call.opset >= 11 else "asymmetric"
    nearest_mode = call.attr("nearest_mode", "round_prefer_floor") if call.opset >= 11 else "floor"
    antialias = bool(call.attr("antialias", 0))
    if mode == "nearest":
        if antialias:
            call.unsupported("antialias with mode 'nearest'")
        coeffs = _nearest(nearest_mode)
    elif mode == "linear":
        coeffs = _linear_aa if antialias else _linear
    elif mode == "cubic":
        coeffs = _cubic(call.attr("cubic_coeff_a", -0.75), antialias)
    else:
        call.unsupported(f"mode {mode!r}")
    r = x.ndim
    axes = [a % r for a in call.attr("axes", list(range(r)))]
    roi_v = call.host(roi).astype(np.float64) if roi is not None and roi.numel else None
    scale_v = call.host(scales).astype(np.float64) if scales is not None and scales.numel else None
    size_v = call.ints(sizes) if sizes is not None and sizes.numel else None
    full_scale, full_size = [1.0] * r, list(x.shape)
    if size_v is not None:
        for a, s in zip(axes, size_v):
            full_size[a], full_scale[a] = s, s / x.shape[a]
        policy = call.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            s = pick(full_scale[a] for a in axes)
            for a in axes:
                full_scale[a], full_size[a] = s, int(s * x.shape[a] + 0.5)
    else:
        for a, s in zip(axes, scale_v):
            full_scale[a] = s
            full_size[a] = int(np.floor(s * x.shape[a] + 1e-9)) if call.opset >= 11 else int(np.floor(s * x.shape[a]))
    rois = {a: (0.0, 1.0) for a in range(r)}
    if roi_v is not None:
        k = len(roi_v) // 2
        for i, a in enumerate(axes if k == len(axes) else range(r)):
            rois[a] = (roi_v[i], roi_v[k + i])
    for a in axes:
        if full_scale[a] == 1.0 and full_size[a] == x.shape[a] and rois[a] == (0.0, 1.0):
            continue
        x = resize_axis(call, x, a, full_size[a], full_scale[a], coeffs, ct, rois[a], mode == "nearest",
                        bool(call.attr("exclude_outside", 0)), call.attr("extrapolation_value", 0.0))
    return x


@op("Upsample")
def upsample(call, x, scales=None):
    scales = call.attr("scales") if scales is None else call.host(scales).astype(np.float64)
    mode = call.attr("mode", "nearest")
    coeffs = _nearest("floor") if mode == "nearest" else _linear
    for a, s in enumerate(scales):
        if s != 1.0:
            x = resize_axis(call, x, a, int(np.floor(s * x.shape[a])), float(s), coeffs, "asymmetric",
                            (0.0, 1.0), mode == "nearest")
    return x
