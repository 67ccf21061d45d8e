"""`unfold` (im2col) and `fold` (col2im), PyTorch's `F.unfold`/`F.fold` over the `unfold` and `fold`
primitives (each the other's gradient).

Example:
    >>> cols = unfold(ember.randn(2, 3, 5, 5), 3, padding=1)
    >>> cols.shape, fold(cols, (5, 5), 3, padding=1).shape
    ((2, 27, 25), (2, 3, 5, 5))
"""

from __future__ import annotations

from ...api._common import apply
from ...errors import ShapeError
from ...tensor import Tensor
from .args import ntuple


def _params(op: str, kernel_size, dilation, padding, stride) -> dict:
    return dict(kernel=ntuple(op, "kernel_size", kernel_size, 2), stride=ntuple(op, "stride", stride, 2),
                padding=ntuple(op, "padding", padding, 2, minimum=0), dilation=ntuple(op, "dilation", dilation, 2))


def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """Sliding windows of an image as columns: (N, C, H, W) -> (N, C * kh * kw, L).

    Args:
        input: (N, C, H, W) or unbatched (C, H, W).
        kernel_size, dilation, padding, stride: ints or pairs, as for `conv2d`.
    y[n, (c*kh + i)*kw + j, l] = x_pad[n, c, oh*stride + i*dilation, ow*stride + j*dilation] where window
    l = oh * out_w + ow; L = out_h * out_w.

    Example:
        >>> unfold(ember.randn(1, 2, 4, 4), 2, stride=2).shape
        (1, 8, 4)
    """
    params = _params("unfold", kernel_size, dilation, padding, stride)
    if input.ndim == 3:
        return apply("unfold", input.unsqueeze(0), **params).squeeze(0)
    if input.ndim != 4:
        raise ShapeError("unfold", f"input of shape {input.shape} is neither (N, C, H, W) nor (C, H, W)")
    return apply("unfold", input, **params)


def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """Columns summed back into an image, the adjoint of `unfold`: (N, C * kh * kw, L) -> (N, C, H, W).

    Args:
        input: (N, C * kh * kw, L) or unbatched (C * kh * kw, L).
        output_size: (H, W) of the image (an int for a square one).
        kernel_size, dilation, padding, stride: as for `unfold`; L must be the number of windows.
    Overlapping windows add up, so fold(unfold(x)) is x times the number of windows covering each pixel.

    Example:
        >>> fold(ember.ones(1, 4, 9), (4, 4), 2).shape
        (1, 1, 4, 4)
    """
    params = _params("fold", kernel_size, dilation, padding, stride)
    size = ntuple("fold", "output_size", output_size, 2)
    if input.ndim == 2:
        return apply("fold", input.unsqueeze(0), output_size=size, **params).squeeze(0)
    if input.ndim != 3:
        raise ShapeError("fold", f"input of shape {input.shape} is neither (N, C * kh * kw, L) nor (C * kh * kw, L)")
    return apply("fold", input, output_size=size, **params)
