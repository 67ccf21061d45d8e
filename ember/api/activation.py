"""Activation functions, also reachable as `ember.activation` and `ember.nn.functional`.

Each is a composition of primitives, so its gradient comes from theirs. The formulas are PyTorch's.

Example:
    >>> from ember import activation as F
    >>> F.relu(ember.tensor([-1.0, 2.0])).tolist()
    [0.0, 2.0]
"""

from __future__ import annotations

import math

from .. import amp
from ..errors import ShapeError
from ..ops.primitive import normalize_dim
from ._common import Tensor
from .math import _float_unary, where

_exact_gelu = _float_unary("gelu")  # ints and bools become the default float first, as for erf

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def relu(x: Tensor) -> Tensor:
    """`max(x, 0)`; the gradient at 0 is 0."""
    return x.masked_fill(x <= 0, 0)


def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    """`x` for x > 0, else `negative_slope * x`."""
    return (x * negative_slope).where(x <= 0, x)


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """`x` for x > 0, else `alpha * (exp(x) - 1)`."""
    return x.where(x > 0, x.expm1() * alpha)


def selu(x: Tensor) -> Tensor:
    """`scale * elu(x, alpha)` with the self-normalizing constants."""
    return elu(x, SELU_ALPHA) * SELU_SCALE


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """`x * Phi(x)` with the normal CDF exact (`"none"`) or by the tanh formula (`"tanh"`)."""
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
        return x * 0.5 * (inner.tanh() + 1)
    if approximate != "none":
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    # One primitive (its gradient keeps x alone; the composition kept three intermediates as large).
    return _exact_gelu(x)


def sigmoid(x: Tensor) -> Tensor:
    """`1 / (1 + exp(-x))`."""
    return x.sigmoid()


def silu(x: Tensor) -> Tensor:
    """`x * sigmoid(x)` (also called swish)."""
    return x * x.sigmoid()


@amp.float32
def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """`log(1 + exp(beta * x)) / beta`, linear where `beta * x > threshold`."""
    bx = x * beta
    return x.where(bx > threshold, (bx.masked_fill(bx > threshold, 0).exp().log1p()) / beta)


def mish(x: Tensor) -> Tensor:
    """`x * tanh(softplus(x))`."""
    return x * softplus(x).tanh()


def hard_sigmoid(x: Tensor) -> Tensor:
    """`clamp(x / 6 + 1/2, 0, 1)` (PyTorch's hardsigmoid; the gradient is 0 at the kinks x = +-3)."""
    return where(x >= 3, 1.0, where(x <= -3, 0.0, x / 6 + 0.5))


def hard_swish(x: Tensor) -> Tensor:
    """`x * hard_sigmoid(x)`; PyTorch's gradient at the kinks: 0 at x = -3, 1 at x = 3."""
    return where(x <= -3, 0.0, where(x >= 3, x, x * (x + 3) / 6))


def tanh(x: Tensor) -> Tensor:
    """The hyperbolic tangent."""
    return x.tanh()


def softsign(x: Tensor) -> Tensor:
    """`x / (1 + |x|)`."""
    return x / (x.abs() + 1)


@amp.float32
def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """`exp(x) / sum(exp(x))` along `dim`, shifted by the maximum for stability (over the last dim on a
    GPU cube target: one op, `ember.api.rowwise`)."""
    if not x.dtype.is_float:
        x = x.cast("f32")
    rows = _rows_op(x, dim)
    if rows is not None:
        return rows(x, log=False)
    shifted = _shift(x, dim)
    e = shifted.exp()
    return e / e.sum(dim=dim, keepdim=True)


@amp.float32
def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """`x - logsumexp(x)` along `dim` (as `softmax`, one op over the last dim on a GPU cube target)."""
    if not x.dtype.is_float:
        x = x.cast("f32")
    rows = _rows_op(x, dim)
    if rows is not None:
        return rows(x, log=True)
    if x.numel == 0:
        return x - x.exp().sum(dim=dim, keepdim=True).log()
    m = x.amax(dim=dim, keepdim=True).detach()
    # `x - m` twice rather than one shared value: shared, the fusion writes it in full (and, unfused, a
    # broadcast copy of m as well) beside the input; twice, each fuses into its reader (the sum, the result).
    return (x - m) - (x - m).exp().sum(dim=dim, keepdim=True).log()


def _rows_op(x: Tensor, dim: int):
    """The one-op softmax over the last dim (`rowwise.softmax_rows`) when it takes `x` along
    `dim`, else None (the composition)."""
    if dim not in (-1, x.ndim - 1):
        return None
    from . import rowwise  # lazy: it loads the cube kernel library, which `import ember` does not
    return rowwise.softmax_rows if rowwise.routes(x) else None


def _shift(x: Tensor, dim: int) -> Tensor:
    """`x` minus its (constant) maximum along `dim`, for stability; empty tensors have no maximum."""
    if x.numel == 0:
        return x
    return x - x.amax(dim=dim, keepdim=True).detach()


def glu(x: Tensor, dim: int = -1) -> Tensor:
    """The gated linear unit: `a * sigmoid(b)` for the two halves `a, b` of `x` along `dim`."""
    if x.shape[normalize_dim("glu", dim, x.ndim)] % 2:
        raise ShapeError("glu", f"dim {dim} of shape {x.shape} must have an even size")
    a, b = x.chunk(2, dim)
    return a * b.sigmoid()


__all__ = ["relu", "leaky_relu", "elu", "selu", "gelu", "sigmoid", "silu", "softplus", "mish",
           "hard_sigmoid", "hard_swish", "tanh", "softsign", "softmax", "log_softmax", "glu"]

METHODS = {"relu": relu, "softmax": softmax, "log_softmax": log_softmax}
