"""Gradient clipping by value and by global norm, on `Gradients` (PyTorch's `clip_grad_value_` and
`clip_grad_norm_`), and the list forms the optimizers' `clip_value=` / `clip_norm=` options use.

Example:
    >>> grads = loss.backward()
    >>> total = ember.optim.clip_grad_norm(grads, 1.0, model)
    >>> ember.optim.clip_grad_value(grads, 0.5, model)
"""

from __future__ import annotations

import math
from typing import Iterable

from ..api.shape import stack
from ..autodiff.gradients import Gradients
from ..nn.module import Module
from ..tensor import Tensor

# PyTorch adds this to the total norm before dividing, so a zero norm never divides by zero.
_NORM_EPS = 1e-6


def clip_by_value(grads: list[Tensor], clip_value: float) -> list[Tensor]:
    """Each gradient clamped elementwise: `g <- clamp(g, -clip_value, clip_value)`.

    Example:
        >>> clip_by_value([ember.tensor([-2.0, 0.5])], 1.0)[0].tolist()
        [-1.0, 0.5]
    """
    return [g.clamp(-clip_value, clip_value) for g in grads]


def clip_by_norm(grads: list[Tensor], max_norm: float, norm_type: float = 2.0) -> tuple[list[Tensor], float]:
    """The gradients rescaled to a global norm of at most `max_norm`, and the norm before clipping.

    `total = ||(||g_1||_p, ..., ||g_n||_p)||_p`, then `g_i <- g_i * min(1, max_norm / (total + 1e-6))`.

    Example:
        >>> clipped, total = clip_by_norm([ember.tensor([3.0, 4.0])], 1.0)
        >>> total
        5.0
    """
    if not grads:
        return [], 0.0
    total = float(stack([g.norm(norm_type) for g in grads]).norm(norm_type).item())
    coef = min(1.0, max_norm / (total + _NORM_EPS))
    return [g * coef for g in grads], total


def clip_grad_value(grads: Gradients, clip_value: float, params: Module | Iterable[Tensor]) -> None:
    """Clamp the gradient of each of `params` (a module or tensors) in `grads` to [-clip_value, clip_value].

    Parameters without a gradient in `grads` (frozen, or not reached) are left out.

    Example:
        >>> clip_grad_value(grads, 0.5, model)
    """
    _check_positive("clip_grad_value", "clip_value", clip_value)
    found = _found(grads, params)
    for (p, _), g in zip(found, clip_by_value([g for _, g in found], clip_value)):
        grads.set(p, g)


def clip_grad_norm(grads: Gradients, max_norm: float, params: Module | Iterable[Tensor],
                   norm_type: float = 2.0, error_if_nonfinite: bool = False) -> float:
    """Rescale the gradients of `params` in `grads` so their global `norm_type`-norm is at most
    `max_norm`; returns the norm before clipping (see `clip_by_norm` for the rule).

    Example:
        >>> total = clip_grad_norm(grads, 1.0, model)
    """
    _check_positive("clip_grad_norm", "max_norm", max_norm)
    found = _found(grads, params)
    clipped, total = clip_by_norm([g for _, g in found], max_norm, norm_type)
    if error_if_nonfinite and not math.isfinite(total):
        raise RuntimeError(f"clip_grad_norm: the total norm of order {norm_type} is {total}; "
                           f"pass error_if_nonfinite=False to clip anyway")
    for (p, _), g in zip(found, clipped):
        grads.set(p, g)
    return total


def _found(grads: Gradients, params: Module | Iterable[Tensor]) -> list[tuple[Tensor, Tensor]]:
    if not isinstance(grads, Gradients):
        raise TypeError(f"expected the Gradients of backward(), got {type(grads).__name__}")
    tensors = params.parameters() if isinstance(params, Module) else list(params)
    pairs = []
    for p in tensors:
        if not isinstance(p, Tensor):
            raise TypeError(f"params must be a Module or tensors, got an element of type {type(p).__name__}")
        if p.requires_grad and p in grads:
            pairs.append((p, grads.get(p)))
    return pairs


def _check_positive(who: str, key: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise ValueError(f"{who}: {key} must be a positive number, got {value!r}")
