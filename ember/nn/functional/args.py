"""Argument handling shared by the functional module ops: per-dim tuples and unbatched inputs."""

from __future__ import annotations

from typing import Callable

from ...errors import ShapeError
from ...tensor import Tensor


def ntuple(op: str, name: str, value, nd: int, minimum: int = 1) -> tuple[int, ...]:
    """`value` (an int, or a sequence of `nd` ints) as `nd` ints, each at least `minimum`.

    Example:
        >>> ntuple("conv2d", "stride", 2, 2)
        (2, 2)
    """
    items = (value,) * nd if isinstance(value, int) else tuple(value)
    if len(items) != nd or not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        raise ShapeError(op, f"{name} must be an int or {nd} ints, got {value!r}")
    if any(v < minimum for v in items):
        raise ShapeError(op, f"{name} must be at least {minimum}, got {value!r}")
    return items


def batched(op: str, x: Tensor, nd: int, run: Callable[[Tensor], Tensor]):
    """Run `run` on `x` of shape (N, C, *spatial), or on an unbatched (C, *spatial) `x` as a batch of one.

    `run` may return a tensor or a tuple of tensors; each gets its batch dim removed again.

    Example:
        >>> batched("max_pool1d", ember.ones(3, 8), 1, lambda x: x[..., ::2]).shape
        (3, 4)
    """
    if x.ndim == nd + 2:
        return run(x)
    if x.ndim != nd + 1:
        raise ShapeError(op, f"input of shape {x.shape} is neither (N, C, *spatial) nor (C, *spatial) with "
                             f"{nd} spatial dims")
    out = run(x.unsqueeze(0))
    return tuple(t.squeeze(0) for t in out) if isinstance(out, tuple) else out.squeeze(0)
