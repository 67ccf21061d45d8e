"""Max and average pooling (1-d, 2-d, 3-d), PyTorch's functional API over the `max_pool`,
`max_pool_indices` and `avg_pool` primitives.

Input is (N, C, *spatial) or unbatched (C, *spatial). Output length per dim:
floor((n + 2*padding - dilation*(kernel - 1) - 1) / stride) + 1, or the ceiling with `ceil_mode`
(a last window must start inside the input or its left padding). Padding is at most half the kernel.

Example:
    >>> max_pool2d(ember.randn(8, 16, 28, 28), 2).shape
    (8, 16, 14, 14)
"""

from __future__ import annotations

from ...api._common import apply
from ...tensor import Tensor
from .args import batched, ntuple


def max_pool(x: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
             return_indices: bool = False, *, nd: int, op: str = "max_pool"):
    """N-d max pooling behind max_pool1d/2d/3d.

    Args:
        x: (N, C, *spatial) or (C, *spatial).
        kernel_size: window size, an int or one per spatial dim.
        stride: step between windows (default: `kernel_size`).
        padding: implicit -inf on both sides (at most half the kernel).
        dilation: spacing between window elements.
        ceil_mode: round the output size up instead of down.
        return_indices: also return the flat index (into each input plane) of every maximum.
    y[n, c, i] = max_k x_pad[n, c, i*stride + k*dilation]. The gradient goes to the winning element.

    Example:
        >>> y, idx = max_pool(ember.tensor([[[1.0, 3.0, 2.0, 0.0]]]), 2, return_indices=True, nd=1)
        >>> y.tolist(), idx.tolist()
        ([[[3.0, 2.0]]], [[[1, 2]]])
    """
    kernel = ntuple(op, "kernel_size", kernel_size, nd)
    params = dict(kernel=kernel, stride=kernel if stride is None else ntuple(op, "stride", stride, nd),
                  padding=ntuple(op, "padding", padding, nd, minimum=0), dilation=ntuple(op, "dilation", dilation, nd),
                  ceil_mode=bool(ceil_mode))

    def run(xb: Tensor):
        y = apply("max_pool", xb, **params)
        return (y, apply("max_pool_indices", xb, **params)) if return_indices else y

    return batched(op, x, nd, run)


def avg_pool(x: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
             count_include_pad: bool = True, divisor_override: int | None = None, *, nd: int,
             op: str = "avg_pool") -> Tensor:
    """N-d average pooling behind avg_pool1d/2d/3d.

    Args:
        x: (N, C, *spatial) or (C, *spatial).
        kernel_size: window size, an int or one per spatial dim.
        stride: step between windows (default: `kernel_size`).
        padding: implicit zeros on both sides (at most half the kernel).
        ceil_mode: round the output size up instead of down.
        count_include_pad: divide by the window size clipped to the padded input (True) or by the number
            of input elements in the window (False).
        divisor_override: divide by this instead.
    y[n, c, i] = sum_k x_pad[n, c, i*stride + k] / divisor(i).

    Example:
        >>> avg_pool(ember.tensor([[[1.0, 3.0, 2.0, 0.0]]]), 2, nd=1).tolist()
        [[[2.0, 1.0]]]
    """
    kernel = ntuple(op, "kernel_size", kernel_size, nd)
    params = dict(kernel=kernel, stride=kernel if stride is None else ntuple(op, "stride", stride, nd),
                  padding=ntuple(op, "padding", padding, nd, minimum=0), ceil_mode=bool(ceil_mode),
                  count_include_pad=bool(count_include_pad), divisor_override=divisor_override)
    return batched(op, x, nd, lambda xb: apply("avg_pool", xb, **params))


def max_pool1d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """1-d max pooling of (N, C, L) or (C, L); see `max_pool` for the arguments and the math.

    Example:
        >>> max_pool1d(ember.tensor([[1.0, 3.0, 2.0, 0.0]]), 2).tolist()
        [[3.0, 2.0]]
    """
    return max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, nd=1, op="max_pool1d")


def max_pool2d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """2-d max pooling of (N, C, H, W) or (C, H, W); see `max_pool`.

    Example:
        >>> max_pool2d(ember.randn(1, 3, 7, 7), 2, ceil_mode=True).shape
        (1, 3, 4, 4)
    """
    return max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, nd=2, op="max_pool2d")


def max_pool3d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """3-d max pooling of (N, C, D, H, W) or (C, D, H, W); see `max_pool`.

    Example:
        >>> max_pool3d(ember.randn(1, 1, 4, 4, 4), 2).shape
        (1, 1, 2, 2, 2)
    """
    return max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, nd=3, op="max_pool3d")


def avg_pool1d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    """1-d average pooling of (N, C, L) or (C, L); see `avg_pool`.

    Example:
        >>> avg_pool1d(ember.tensor([[1.0, 3.0, 2.0]]), 2, stride=1).tolist()
        [[2.0, 2.5]]
    """
    return avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, nd=1, op="avg_pool1d")


def avg_pool2d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """2-d average pooling of (N, C, H, W) or (C, H, W); see `avg_pool`.

    Example:
        >>> avg_pool2d(ember.ones(1, 1, 4, 4), 2).tolist()
        [[[[1.0, 1.0], [1.0, 1.0]]]]
    """
    return avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, nd=2,
                    op="avg_pool2d")


def avg_pool3d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """3-d average pooling of (N, C, D, H, W) or (C, D, H, W); see `avg_pool`.

    Example:
        >>> avg_pool3d(ember.ones(1, 1, 2, 2, 2), 2).tolist()
        [[[[[1.0]]]]]
    """
    return avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, nd=3,
                    op="avg_pool3d")
