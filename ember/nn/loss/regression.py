"""Losses between predictions and real-valued targets: MSE, L1, Huber, smooth L1, Poisson and Gaussian
negative log likelihoods. Formulas and reductions are PyTorch's.

Example:
    >>> mse_loss(ember.tensor([1.0, 2.0]), ember.tensor([0.0, 0.0])).item()
    2.5
"""

from __future__ import annotations

import math

from ... import amp
from ...errors import ShapeError
from ...tensor import Tensor
from .reduction import check_reduction, check_same_shape, floating, reduce


def _pair(op: str, input: Tensor, target: Tensor) -> Tensor:
    """`input - target` after checking both are float tensors of one shape."""
    floating(op, input, "input")
    floating(op, target, "target")
    check_same_shape(op, input=input, target=target)
    return input - target


@amp.float32
def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """Mean squared error.

    Args:
        input: predictions, any shape.
        target: targets of the same shape.
        reduction: `"mean"`, `"sum"` or `"none"` over `l_i = (input_i - target_i)^2`.

    Example:
        >>> mse_loss(ember.tensor([1.0, 2.0]), ember.tensor([0.0, 0.0])).item()
        2.5
    """
    d = _pair("mse_loss", input, target)
    return reduce(d * d, reduction, "mse_loss")


@amp.float32
def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """Mean absolute error.

    Args:
        input: predictions, any shape.
        target: targets of the same shape.
        reduction: `"mean"`, `"sum"` or `"none"` over `l_i = |input_i - target_i|`.

    Example:
        >>> l1_loss(ember.tensor([1.0, -2.0]), ember.tensor([0.0, 0.0])).item()
        1.5
    """
    d = _pair("l1_loss", input, target)
    return reduce(d.abs(), reduction, "l1_loss")


@amp.float32
def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0) -> Tensor:
    """Huber loss: quadratic near zero, linear beyond `delta`.

    Args:
        input: predictions, any shape.
        target: targets of the same shape.
        reduction: `"mean"`, `"sum"` or `"none"`.
        delta: where `l = 0.5 d^2` (for |d| < delta) turns into `l = delta (|d| - delta / 2)`; > 0.

    Example:
        >>> huber_loss(ember.tensor([3.0]), ember.tensor([0.0])).item()
        2.5
    """
    if delta <= 0:
        raise ValueError(f"huber_loss: delta must be positive, got {delta}")
    d = _pair("huber_loss", input, target)
    a = d.abs()
    loss = (d * d * 0.5).where(a < delta, (a - 0.5 * delta) * delta)
    return reduce(loss, reduction, "huber_loss")


@amp.float32
def smooth_l1_loss(input: Tensor, target: Tensor, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """Smooth L1 loss: `0.5 d^2 / beta` for |d| < beta, else `|d| - beta / 2` (L1 when beta = 0).

    Args:
        input: predictions, any shape.
        target: targets of the same shape.
        reduction: `"mean"`, `"sum"` or `"none"`.
        beta: the width of the quadratic zone; >= 0.

    Example:
        >>> smooth_l1_loss(ember.tensor([0.5]), ember.tensor([0.0])).item()
        0.125
    """
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be non-negative, got {beta}")
    d = _pair("smooth_l1_loss", input, target)
    a = d.abs()
    if beta == 0:
        return reduce(a, reduction, "smooth_l1_loss")
    loss = (d * d * (0.5 / beta)).where(a < beta, a - 0.5 * beta)
    return reduce(loss, reduction, "smooth_l1_loss")


@amp.float32
def poisson_nll_loss(input: Tensor, target: Tensor, log_input: bool = True, full: bool = False,
                     eps: float = 1e-8, reduction: str = "mean") -> Tensor:
    """Negative log likelihood of `target` under a Poisson distribution of rate given by `input`.

    Args:
        input: the rate `r`, or its log when `log_input`.
        target: counts of the same shape.
        log_input: `l = exp(input) - target * input` if true, else `l = input - target * log(input + eps)`.
        full: add Stirling's term `t log t - t + 0.5 log(2 pi t)` where the target `t` > 1.
        eps: keeps the log finite when `log_input` is false.
        reduction: `"mean"`, `"sum"` or `"none"`.

    Example:
        >>> poisson_nll_loss(ember.tensor([0.0]), ember.tensor([1.0])).item()
        1.0
    """
    _pair("poisson_nll_loss", input, target)
    if log_input:
        loss = input.exp() - target * input
    else:
        loss = input - target * (input + eps).log()
    if full:
        # The approximation is only used where it is meaningful (t > 1), as in PyTorch.
        safe = target.masked_fill(target <= 1, 1.0)
        stirling = safe * safe.log() - safe + (safe * (2 * math.pi)).log() * 0.5
        loss = loss + stirling.masked_fill(target <= 1, 0.0)
    return reduce(loss, reduction, "poisson_nll_loss")


def gaussian_nll_loss(input: Tensor, target: Tensor, var: Tensor | float, full: bool = False,
                      eps: float = 1e-6, reduction: str = "mean") -> Tensor:
    """Negative log likelihood of `target` under a normal distribution of mean `input` and variance `var`.

    Args:
        input: the means.
        target: samples of the same shape.
        var: the variances: the shape of `input`, or with one dim of size 1 (shared), or the shape of
            `input` without its last dim, or a float. Must be non-negative; values below `eps` are
            raised to `eps` (the gradient passes through as if unclamped, like PyTorch).
        full: add the constant `0.5 log(2 pi)`.
        eps: the smallest variance used.
        reduction: `"mean"`, `"sum"` or `"none"` over `l = 0.5 (log var + (input - target)^2 / var)`.

    Example:
        >>> gaussian_nll_loss(ember.tensor([0.0]), ember.tensor([2.0]), ember.tensor([1.0])).item()
        2.0
    """
    op = "gaussian_nll_loss"
    d = _pair(op, input, target)
    check_reduction(op, reduction)
    if not isinstance(var, Tensor):
        var = input.detach().new_full(input.shape, float(var))
    if bool((var < 0).any()):
        raise ValueError(f"{op}: var has negative entries")
    if var.shape != input.shape:
        if var.shape == input.shape[:-1]:
            var = var.unsqueeze(-1)
        elif not (var.ndim == input.ndim and
                  [v for n, v in zip(input.shape, var.shape) if n != v] == [1]):
            raise ShapeError(op, f"var of shape {var.shape} does not fit input of shape {input.shape}: "
                                 "use the input's shape, one dim of size 1, or the input's shape without "
                                 "its last dim")
    var = var + (var.clamp(min=eps) - var).detach()
    loss = (var.log() + d * d / var) * 0.5
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return reduce(loss, reduction, op)
