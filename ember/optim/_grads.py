"""Reading and writing `Gradients` by parameter, the one place `ember.optim` reaches into them.

`Gradients` (ember/autodiff) has a public `get` and `remove` but no setter yet; clipping in place and
accumulation need one, so they go through these two helpers rather than touching its internals at
every call site.
"""

from __future__ import annotations

from typing import Iterable

from ..autodiff.gradients import Gradients
from ..tensor import Tensor


def set_grad(grads: Gradients, tensor: Tensor, value: Tensor) -> None:
    """Replace the gradient of `tensor` in `grads` (it must be tracked by autodiff)."""
    grads._by_node[Gradients._node(tensor)] = value


def gradients_of(pairs: Iterable[tuple[Tensor, Tensor]]) -> Gradients:
    """A `Gradients` holding `grad` for each `(tracked tensor, grad)` pair."""
    return Gradients({Gradients._node(t): g for t, g in pairs})
