"""Softmax, log-softmax, layer norm, RMS norm and cross entropy over the last dim, one op each on GPUs.

On a GPU cube target (CUDA, wgpu) the tensor API takes these `@ember.backend_extension` primitives
(ember/extension.py) over the kernel library's row kernels (`ember/kernels/softmax.py`,
`norm.py`), which read a row of up to 8192 elements once and write it once (`reduce.resident_shape`),
instead of composing them from primitives (three or four fused passes). `routes(x)` says when.

- `softmax_rows(x, log=...)`: exp(x) / sum(exp(x)) over the last dim, or its log;
- `norm_rows(x, weight, bias, eps=..., rms=..., has_weight=..., has_bias=...)`: layer norm (biased
  variance) or RMS norm over the last dim, then the optional affine map; `weight`/`bias` are the (n,)
  parameters, or any tensor (x itself) standing in for a missing one;
- `cross_entropy_rows(x, target)`: logits (R, C) against a class index per row -> (R, 2), each row's
  negative log likelihood and logsumexp (`ember.kernels.cross_entropy`: one read of the logits,
  any row length). Its gradient is one fused elementwise pass over the logits, `softmax * (g_nll +
  g_lse) - onehot * g_nll` (the one-hot from a comparison against class positions kept on the device),
  so no (R, C) log-probabilities are kept for backward and no (R, C) gradient is scattered into zeros.

The gradients are written with ember ops: softmax's `y * (g - sum(g * y))`, log-softmax's
`g - exp(y) * sum(g)`, and the norms' usual formulas from the recomputed statistics. Each op has a
NumPy reference (the tests' oracle).

Example:
    >>> x = ember.randn(4, 10, device=ember.Device.wgpu())
    >>> routes(x), softmax_rows(x, log=False).sum(-1).shape
    (True, (4,))
"""

from __future__ import annotations

import math

import numpy as np

from ..autodiff.graph import creating_graph
from ..kernels import cross_entropy as ce_kernels, norm as norm_kernels
from ..kernels.common import check_elements, check_float_dtypes
from ..kernels.reduce import accumulator, resident_shape
from ..kernels.softmax import softmax as softmax_kernel, softmax_grad as softmax_grad_kernel
from ..dtype import DType
from ..errors import ShapeError
from ..extension import backend_extension, cube_target
from ..ops.primitive import is_half
from ..tensor import Tensor
from ..ops.constants import kept

GPU_TARGETS = ("cuda", "wgsl")


def routes(x: Tensor) -> bool:
    """Whether the tensor API runs softmax / norms of `x` over its last dim as the ops of this module:
    a non-empty float tensor of at least one dim on a device with a GPU cube target.

    Example:
        >>> routes(ember.randn(3, 4, device=ember.Device.numpy()))
        False
    """
    return x.ndim >= 1 and x.dtype.is_float and x.numel > 0 and cube_target(x.device) in GPU_TARGETS


def _softmax_reference(x: np.ndarray, *, log: bool) -> np.ndarray:
    w = x.astype(np.float32) if is_half(x.dtype) else x
    shifted = w - w.max(-1, keepdims=True)
    e = np.exp(shifted)
    s = e.sum(-1, keepdims=True)
    return (shifted - np.log(s) if log else e / s).astype(x.dtype)


# The rules check all the kernels check but the row length, which depends on the device (the callers
# take these ops where `routes` and `_held` say): the ops are recorded by the fusion layer (`pure=True`)
# and run at the next sync point, so their errors must come at the call.
def _rows_shape(op: str, x: tuple, *others: tuple) -> tuple:
    if any(tuple(o) != tuple(x) for o in others):
        raise ShapeError(op, f"needs operands of one shape, got {', '.join(str(tuple(a)) for a in (x, *others))}")
    check_elements(op, x)
    return x


def _rows_dtype(op: str, x: DType, *others: DType) -> DType:
    check_float_dtypes(op, x, *others)
    return x


def _held(x: Tensor) -> bool:
    """Whether the rows of `x` fit the gradient kernels (held in a cube's registers). Never in a backward
    walk that creates a graph: the kernels have no gradient of their own, the composed rules do."""
    return not creating_graph() and resident_shape(x.shape[-1], cube_target(x.device)) is not None


def _softmax_backward(g: Tensor, out: Tensor, x: Tensor, *, log: bool) -> tuple:
    if _held(out) and g.dtype is out.dtype:
        return (softmax_rows_grad(out, g, log=log),)
    if log:
        return (g - out.exp() * g.sum(-1, keepdim=True),)
    return (out * (g - (g * out).sum(-1, keepdim=True)),)


def _softmax_grad_reference(y: np.ndarray, g: np.ndarray, *, log: bool) -> np.ndarray:
    w, gw = (a.astype(np.float32) if is_half(a.dtype) else a for a in (y, g))
    dx = gw - np.exp(w) * gw.sum(-1, keepdims=True) if log else w * (gw - (gw * w).sum(-1, keepdims=True))
    return dx.astype(y.dtype)


@backend_extension(shape=lambda y, g, *, log: _rows_shape("softmax_grad", y, g),
                   dtype=lambda y, g, *, log: _rows_dtype("softmax_grad", y, g), reference=_softmax_grad_reference,
                   name="softmax_rows_grad", pure=True)
def softmax_rows_grad(y, g, *, log: bool):
    """The input gradient of `softmax_rows` from its output `y` and the output's gradient `g`."""
    return softmax_grad_kernel(y, g, log)


@backend_extension(shape=lambda x, *, log: _rows_shape("softmax", x), dtype=lambda x, *, log: _rows_dtype("softmax", x),
                   reference=_softmax_reference, backward=_softmax_backward, name="softmax_rows", saves="output",
                   pure=True)  # the rule reads y only: autodiff need not keep x
def softmax_rows(x, *, log: bool):
    """Softmax (or log-softmax, `log`) of `x`'s rows (its last dim) by the library's row kernel."""
    return softmax_kernel(x, log)


def _norm_reference(x, weight, bias, *, eps: float, rms: bool, has_weight: bool, has_bias: bool) -> np.ndarray:
    w = x.astype(np.float32) if is_half(x.dtype) else x
    d = w if rms else w - w.mean(-1, keepdims=True)
    y = d / np.sqrt((d * d).mean(-1, keepdims=True) + eps)
    if has_weight:
        y = y * weight
    if has_bias:
        y = y + bias
    return y.astype(x.dtype)


def _norm_backward(g: Tensor, out: Tensor, x: Tensor, weight: Tensor, bias: Tensor, *, eps: float, rms: bool,
                   has_weight: bool, has_bias: bool) -> tuple:
    n = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    if _held(x) and g.dtype is x.dtype:
        packed = norm_rows_grad(x, weight, g, eps=eps, rms=rms, has_weight=has_weight)
        return (packed[:rows].reshape(x.shape), packed[rows] if has_weight else None,
                packed[rows + 1] if has_bias else None)
    d = x if rms else x - x.mean(-1, keepdim=True)
    inv = ((d * d).mean(-1, keepdim=True) + eps).rsqrt()
    xhat = d * inv
    gw = g * weight if has_weight else g
    inner = gw - xhat * (gw * xhat).mean(-1, keepdim=True)
    dx = (inner if rms else inner - gw.mean(-1, keepdim=True)) * inv
    dw = (g * xhat).reshape(rows, n).sum(0) if has_weight else None
    db = g.reshape(rows, n).sum(0) if has_bias else None
    return dx, dw, db


def _norm_shape(x, weight, bias, *, eps, rms, has_weight, has_bias) -> tuple:
    op = "rms_norm" if rms else "layer_norm"
    norm_kernels.check_params(op, x, weight if has_weight else None, bias if has_bias else None)
    return _rows_shape(op, x)


def _norm_dtype(x, weight, bias, *, rms, **_params) -> DType:
    return _rows_dtype("rms_norm" if rms else "layer_norm", x)


def _norm_grad_shape(x, weight, g, *, eps, rms, has_weight) -> tuple:
    op = "rms_norm_grad" if rms else "layer_norm_grad"
    if not x:
        raise ShapeError(op, "needs x of at least one dimension")
    norm_kernels.check_params(op, x, weight if has_weight else None, None)
    _rows_shape(op, x, g)
    out = (math.prod(x[:-1]) + 2, x[-1])
    check_elements(op, out)
    return out


# saves="inputs": the backward recomputes the statistics from x, so autodiff need not keep y
@backend_extension(shape=_norm_shape, dtype=_norm_dtype, reference=_norm_reference, backward=_norm_backward,
                   name="norm_rows", saves="inputs", pure=True)
def norm_rows(x, weight, bias, *, eps: float, rms: bool, has_weight: bool, has_bias: bool):
    """Layer norm (or RMS norm, `rms`) of `x`'s rows with the optional affine map, by the library's kernel."""
    return norm_kernels.norm(x, weight if has_weight else None, bias if has_bias else None, eps, rms)


def _norm_grad_reference(x, weight, g, *, eps: float, rms: bool, has_weight: bool) -> np.ndarray:
    w, gw = (a.astype(np.float32) if is_half(a.dtype) else a for a in (x, g))
    n = x.shape[-1]
    d = w if rms else w - w.mean(-1, keepdims=True)
    inv = 1 / np.sqrt((d * d).mean(-1, keepdims=True) + eps)
    xhat = d * inv
    gs = gw * weight if has_weight else gw
    inner = gs - xhat * (gs * xhat).mean(-1, keepdims=True)
    dx = (inner if rms else inner - gs.mean(-1, keepdims=True)) * inv
    sums = [(gw * xhat).reshape(-1, n).sum(0), gw.reshape(-1, n).sum(0)]
    return np.concatenate([dx.reshape(-1, n)] + [s[None] for s in sums]).astype(x.dtype)


@backend_extension(shape=_norm_grad_shape, dtype=lambda x, weight, g, *, rms, **_: _rows_dtype(
                       "rms_norm_grad" if rms else "layer_norm_grad", x, g),
                   reference=_norm_grad_reference, name="norm_rows_grad", pure=True)
def norm_rows_grad(x, weight, g, *, eps: float, rms: bool, has_weight: bool):
    """The gradients of `norm_rows` packed as (rows + 2, n): the input's rows, then the weight's and the
    bias's (`ember.kernels.norm.norm_grad`)."""
    return norm_kernels.norm_grad(x, weight if has_weight else None, g, eps, rms)


def _cross_entropy_reference(x: np.ndarray, target: np.ndarray) -> np.ndarray:
    w = x.astype(np.float32) if is_half(x.dtype) else x
    if not w.size:
        return np.zeros((len(w), 2), w.dtype)
    top = w.max(-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0)  # a row of -inf: logsumexp -inf, not NaN
    with np.errstate(divide="ignore"):
        lse = np.log(np.exp(w - top).sum(-1)) + top[:, 0]
    with np.errstate(invalid="ignore"):
        return np.stack([lse - w[np.arange(len(w)), target], lse], axis=-1).astype(w.dtype)


_positions: dict = {}  # (C, dtype, device) -> arange(C) on the device


def _class_positions(classes: int, dtype: DType, like: Tensor) -> Tensor:
    """arange(`classes`) of `dtype` on the device of `like`, made once and kept (`constants.kept`)."""
    return kept(_positions, (classes, dtype), lambda: np.arange(classes, dtype=dtype.np), like)


def _cross_entropy_backward(g: Tensor, out: Tensor, x: Tensor, target: Tensor) -> tuple:
    nll_grad = g[:, :1]
    lse = out[:, 1:]
    hit = target.unsqueeze(1) == _class_positions(x.shape[1], target.dtype, x)
    dx = (x.cast(out.dtype) - lse).exp() * (nll_grad + g[:, 1:]) - hit.cast(out.dtype) * nll_grad
    return dx.cast(x.dtype), None


def _cross_entropy_dtype(x: DType, target: DType) -> DType:
    ce_kernels.check_dtypes("cross_entropy", x, target)
    return accumulator("sum", x)  # what the kernel computes in


def _cross_entropy_shape(x: tuple, target: tuple) -> tuple:
    out = ce_kernels.check_operands("cross_entropy", x, target)
    check_elements("cross_entropy", x)
    return out


@backend_extension(shape=_cross_entropy_shape, dtype=_cross_entropy_dtype, reference=_cross_entropy_reference,
                   backward=_cross_entropy_backward,
                   name="cross_entropy_rows", saves="all", pure=True)
def cross_entropy_rows(x, target):
    """(R, 2): each row's `logsumexp(x_r) - x_r[target_r]` and `logsumexp(x_r)`, in the accumulator dtype
    (f32 for f16/bf16), by the library's one-read kernel. Targets must be in [0, C): the caller checks.

    Example:
        >>> x = ember.zeros(2, 4, device=ember.Device.wgpu())
        >>> cross_entropy_rows(x, ember.tensor([0, 3], dtype="i32", device=x.device))[:, 0].tolist()
        [1.3862943649291992, 1.3862943649291992]
    """
    return ce_kernels.cross_entropy(x, target)
