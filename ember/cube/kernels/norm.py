"""Layer norm and RMS norm over the last dim: one cube per row.

    layer_norm(x) = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias     (biased variance)
    rms_norm(x)   = x / sqrt(mean(x**2) + eps) * weight

`weight` and `bias` are optional (comptime flags choose the code); f16/bf16 rows are computed in f32.
Two reading passes (mean, then the centred sum of squares: no cancellation) and one writing pass,
each in unmasked strides of the cube's units then the tail (`softmax.row_fold`); the cube's units as
in softmax (`reduce.row_units`: one vector on the C target).

Example:
    >>> layer_norm(np.array([[1.0, 3.0]], np.float32))
    array([[-0.999995,  0.999995]], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from ... import cube
from ...errors import DTypeError, ShapeError
from .common import check_size, contiguous, cube_dtype, empty
from .reduce import accumulator, block_reduce, row_units
from .softmax import row_fold


@cube.function
def norm_at(x, weight, bias, out, row, j, mean, inv, has_weight, has_bias, T):
    y = (T(x[row + j]) - mean) * inv
    if has_weight:
        y = y * T(weight[j])
    if has_bias:
        y = y + T(bias[j])
    out[row + j] = out.dtype(y)


@cube.kernel
def norm_kernel(x: cube.Array, weight: cube.Array, bias: cube.Array, out: cube.Array, n: cube.i32,
                eps: cube.f32, rms: cube.Comptime[bool], has_weight: cube.Comptime[bool],
                has_bias: cube.Comptime[bool], T: cube.Comptime, units: cube.Comptime[int]):
    row = cube.CUBE_POS * n
    mean = T(0)
    if not rms:
        mean = block_reduce("sum", row_fold("sum", T(0), x, row, n, T(0), T, units), units) / T(n)
    inv = cube.rsqrt(block_reduce("sum", row_fold("sq", T(0), x, row, n, mean, T, units), units) / T(n) + T(eps))
    main = n - n % units
    for k in range(0, main, units):
        norm_at(x, weight, bias, out, row, k + cube.UNIT_POS, mean, inv, has_weight, has_bias, T)
    j = main + cube.UNIT_POS
    if j < n:
        norm_at(x, weight, bias, out, row, j, mean, inv, has_weight, has_bias, T)


def _norm(x, weight, bias, eps: float, rms: bool) -> np.ndarray:
    name = "rms_norm" if rms else "layer_norm"
    t = cube_dtype(x.dtype)
    if not t.is_float:
        raise DTypeError(f"{name} needs a float input, got {t.name}")
    n = x.shape[-1] if x.ndim else 1
    for label, p in (("weight", weight), ("bias", bias)):
        if p is not None and np.shape(p) != (n,):
            raise ShapeError(name, f"{label} of shape {np.shape(p)} does not match the last dim {n} of {x.shape}")
    x = contiguous(x)
    out = empty(x.shape, x.dtype, x)
    check_size(name, x)
    if x.size == 0:
        return out
    units = row_units(n, accumulator("sum", t), x)
    w = contiguous(weight) if weight is not None else np.zeros(1, x.dtype)
    b = contiguous(bias) if bias is not None else np.zeros(1, x.dtype)
    norm_kernel.launch(cube.CubeCount(x.size // n), cube.CubeDim(units), x, w, b, out, n, float(eps),
                       rms=rms, has_weight=weight is not None, has_bias=bias is not None,
                       T=accumulator("sum", t), units=units)
    return out


def layer_norm(x: np.ndarray, weight=None, bias=None, eps: float = 1e-5) -> np.ndarray:
    """Normalize the last dim to zero mean and unit (biased) variance, then scale and shift."""
    return _norm(x, weight, bias, eps, rms=False)


def rms_norm(x: np.ndarray, weight=None, eps: float = 1e-6) -> np.ndarray:
    """Divide the last dim by its root mean square, then scale."""
    return _norm(x, weight, None, eps, rms=True)
