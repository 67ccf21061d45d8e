"""Adaptive pooling: a requested output size instead of a kernel, with PyTorch's window rule.

Output element i of a dim of input length n and output length m pools the input elements
[floor(i*n/m), ceil((i+1)*n/m)). Windows are boxes of varying size, so neither op is a strided window
sweep:

- average: the mean over a box is the mean along one dim after another, so each dim is pooled on its
  own with a constant (n, m) matrix of window weights 1/len applied by `matmul` (its gradient is the
  transposed product);
- max: every window's elements are gathered from the flattened planes as taps in row-major order
  (`index_select`; short windows repeat their last element, which cannot win), the winning tap found
  with `argmax` (the first maximum, PyTorch's choice on ties) and taken with `gather`, so the gradient
  reaches only the winner.

Example:
    >>> adaptive_avg_pool2d(ember.randn(2, 8, 13, 9), (3, None)).shape
    (2, 8, 3, 9)
"""

from __future__ import annotations

import math

import numpy as np

from ...api.creation import from_numpy
from ...errors import ShapeError
from ...tensor import Tensor
from .args import batched


def _output_size(op: str, x: Tensor, output_size, nd: int) -> tuple[int, ...]:
    """`output_size` as `nd` sizes; None keeps the input's size (PyTorch's convention)."""
    items = (output_size,) * nd if output_size is None or isinstance(output_size, int) else tuple(output_size)
    if len(items) != nd:
        raise ShapeError(op, f"output_size must be an int or {nd} sizes, got {output_size!r}")
    sizes = tuple(n if m is None else m for m, n in zip(items, x.shape[-nd:]))
    if any(not isinstance(m, int) or m < 1 for m in sizes):
        raise ShapeError(op, f"output_size must hold positive ints (or None), got {output_size!r}")
    if any(n == 0 for n in x.shape[-nd:]):
        raise ShapeError(op, f"input of shape {x.shape} has an empty spatial dim")
    return sizes


def _bounds(n: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (exclusive) of each of the `m` windows over `n` elements."""
    i = np.arange(m)
    return (i * n) // m, ((i + 1) * n + m - 1) // m


def _avg_along(x: Tensor, dim: int, m: int) -> Tensor:
    n = x.shape[dim]
    if n == m:
        return x
    starts, ends = _bounds(n, m)
    inside = (np.arange(n)[:, None] >= starts) & (np.arange(n)[:, None] < ends)
    weights = from_numpy(np.ascontiguousarray(inside / (ends - starts)).astype(x.dtype.np), device=x.device)
    return (x.movedim(dim, -1) @ weights).movedim(-1, dim)


def _window_taps(sizes, outs) -> np.ndarray:
    """(prod(outs), taps) flat input positions of each output's window, in row-major order.

    Every window is enumerated over the largest window's extent, clamping to its own last element: the
    repeats come after the original, so the first maximum is still the row-major first one.
    """
    axes = []
    for n, m in zip(sizes, outs):
        starts, ends = _bounds(n, m)
        width = int((ends - starts).max())
        axes.append(np.minimum(starts[:, None] + np.arange(width), (ends - 1)[:, None]))  # (m, width)
    flat = np.zeros((1, 1), dtype=np.int64)
    for n, positions in zip(sizes, axes):
        # Combine (outputs so far, taps so far) with this dim's (m, width), both in row-major order.
        flat = (flat[:, None, :, None] * n + positions[None, :, None, :]).reshape(
            flat.shape[0] * positions.shape[0], flat.shape[1] * positions.shape[1])
    return flat


def adaptive_avg_pool(x: Tensor, output_size, *, nd: int, op: str = "adaptive_avg_pool") -> Tensor:
    """N-d adaptive average pooling behind adaptive_avg_pool1d/2d.

    Args:
        x: (N, C, *spatial) or (C, *spatial).
        output_size: an int, or one per spatial dim (None keeps that dim's size).
    y[..., i] = mean of x[..., floor(i*n/m) : ceil((i+1)*n/m)] along each spatial dim.

    Example:
        >>> adaptive_avg_pool(ember.tensor([[[1.0, 2.0, 3.0]]]), 2, nd=1).tolist()
        [[[1.5, 2.5]]]
    """
    sizes = _output_size(op, x, output_size, nd)

    def run(xb: Tensor) -> Tensor:
        for axis, m in enumerate(sizes):
            xb = _avg_along(xb, 2 + axis, m)
        return xb

    return batched(op, x, nd, run)


def adaptive_max_pool(x: Tensor, output_size, return_indices: bool = False, *, nd: int,
                      op: str = "adaptive_max_pool"):
    """N-d adaptive max pooling behind adaptive_max_pool1d/2d.

    Args:
        x: (N, C, *spatial) or (C, *spatial).
        output_size: an int, or one per spatial dim (None keeps that dim's size).
        return_indices: also return each maximum's flat index into its input plane.
    y[..., i] = max of x[..., floor(i*n/m) : ceil((i+1)*n/m)] along each spatial dim.

    Example:
        >>> adaptive_max_pool(ember.tensor([[[1.0, 3.0, 2.0]]]), 2, nd=1).tolist()
        [[[3.0, 3.0]]]
    """
    sizes = _output_size(op, x, output_size, nd)
    positions = _window_taps(x.shape[-nd:], sizes)

    def run(xb: Tensor):
        lead = xb.shape[:2]
        planes = xb.reshape(lead + (math.prod(xb.shape[2:]),))
        taps = planes.index_select(2, from_numpy(positions.reshape(-1), device=xb.device))
        taps = taps.reshape(lead + positions.shape)
        best = taps.argmax(dim=3, keepdim=True)
        values = taps.gather(3, best).reshape(lead + sizes)
        if not return_indices:
            return values
        where = from_numpy(positions, device=xb.device).expand(lead + positions.shape).gather(3, best)
        return values, where.reshape(lead + sizes)

    return batched(op, x, nd, run)


def adaptive_avg_pool1d(input: Tensor, output_size) -> Tensor:
    """Adaptive average pooling of (N, C, L) or (C, L) to length `output_size`; see `adaptive_avg_pool`.

    Example:
        >>> adaptive_avg_pool1d(ember.randn(2, 3, 10), 4).shape
        (2, 3, 4)
    """
    return adaptive_avg_pool(input, output_size, nd=1, op="adaptive_avg_pool1d")


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """Adaptive average pooling of (N, C, H, W) or (C, H, W); see `adaptive_avg_pool`.

    Example:
        >>> adaptive_avg_pool2d(ember.randn(2, 3, 10, 7), 1).shape
        (2, 3, 1, 1)
    """
    return adaptive_avg_pool(input, output_size, nd=2, op="adaptive_avg_pool2d")


def adaptive_max_pool1d(input: Tensor, output_size, return_indices: bool = False):
    """Adaptive max pooling of (N, C, L) or (C, L); see `adaptive_max_pool`.

    Example:
        >>> adaptive_max_pool1d(ember.randn(2, 3, 10), 4).shape
        (2, 3, 4)
    """
    return adaptive_max_pool(input, output_size, return_indices, nd=1, op="adaptive_max_pool1d")


def adaptive_max_pool2d(input: Tensor, output_size, return_indices: bool = False):
    """Adaptive max pooling of (N, C, H, W) or (C, H, W); see `adaptive_max_pool`.

    Example:
        >>> adaptive_max_pool2d(ember.randn(2, 3, 10, 7), (2, 3)).shape
        (2, 3, 2, 3)
    """
    return adaptive_max_pool(input, output_size, return_indices, nd=2, op="adaptive_max_pool2d")
