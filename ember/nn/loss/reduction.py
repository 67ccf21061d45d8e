"""How a loss turns per-element values into its result, and the input checks every loss shares.

`reduction="none"` keeps the per-element losses, `"sum"` adds them, `"mean"` averages them (losses with
weights or ignored entries define their own mean, e.g. the weighted mean of `cross_entropy`).

Example:
    >>> reduce(ember.tensor([1.0, 3.0]), "mean", "mse_loss").item()
    2.0
"""

from __future__ import annotations

from ...errors import DTypeError, ShapeError
from ...tensor import Tensor

REDUCTIONS = ("none", "mean", "sum")


def check_reduction(op: str, reduction: str, allowed: tuple[str, ...] = REDUCTIONS) -> None:
    """Raise `ValueError` naming `op` when `reduction` is not one of `allowed`."""
    if reduction not in allowed:
        raise ValueError(f"{op}: reduction must be one of {allowed}, got {reduction!r}")


def reduce(loss: Tensor, reduction: str, op: str) -> Tensor:
    """`loss` kept (`"none"`), summed (`"sum"`) or averaged (`"mean"`) over all elements.

    Args:
        loss: the per-element losses.
        reduction: `"none"`, `"mean"` or `"sum"`.
        op: the loss's name, for the error message.
    """
    check_reduction(op, reduction)
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def check_same_shape(op: str, **tensors: Tensor) -> None:
    """Raise `ShapeError` naming every argument when the tensors' shapes differ."""
    shapes = {name: t.shape for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise ShapeError(op, f"shapes must match, got {listed}")


def floating(op: str, x: Tensor, name: str) -> Tensor:
    """`x` if it is a float tensor; otherwise a `TypeError`/`DTypeError` naming the argument."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: {name} must be a tensor, got {type(x).__name__}")
    if not x.dtype.is_float:
        raise DTypeError(f"{op}: {name} must be a float tensor, got {x.dtype}")
    return x
