"""Convolutions: conv1d/2d/3d and conv_transpose1d/2d/3d, PyTorch's functional API over the `conv` and
`conv_transpose` primitives (whose gradients are each other and `conv_weight_grad`).

Layouts are PyTorch's: input (N, C_in, *spatial) or unbatched (C_in, *spatial); `conv` weight
(C_out, C_in / groups, *kernel); `conv_transpose` weight (C_in, C_out / groups, *kernel); bias (C_out,).

Example:
    >>> x = ember.randn(8, 3, 28, 28)
    >>> conv2d(x, ember.randn(16, 3, 3, 3), padding=1).shape
    (8, 16, 28, 28)
"""

from __future__ import annotations

from ... import amp
from ...api._common import apply
from ...errors import ShapeError
from ...tensor import Tensor
from .args import batched, ntuple


def _add_bias(op: str, y: Tensor, bias: Tensor | None) -> Tensor:
    if bias is None:
        return y
    if bias.shape != (y.shape[1],):
        raise ShapeError(op, f"bias of shape {bias.shape} does not match {y.shape[1]} output channels")
    return y + bias.reshape((y.shape[1],) + (1,) * (y.ndim - 2))


def _check_weight(op: str, weight: Tensor, nd: int) -> None:
    if weight.ndim != nd + 2:
        raise ShapeError(op, f"weight of shape {weight.shape} is not (out, in / groups, *kernel) with {nd} "
                             f"kernel dims")


def _same_padding(op: str, kernel, stride, dilation) -> tuple[tuple[int, ...], list[int]]:
    """PyTorch's padding='same': d(k - 1) split evenly, the odd element padded on the right."""
    if any(s != 1 for s in stride):
        raise ShapeError(op, f"padding='same' is not supported for strided convolutions (stride {stride})")
    total = [d * (k - 1) for k, d in zip(kernel, dilation)]
    left = tuple(t // 2 for t in total)
    extra = [t - 2 * a for t, a in zip(total, left)]
    return left, extra


@amp.lower_precision
def conv(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
         groups: int = 1, *, nd: int, op: str = "conv") -> Tensor:
    """The N-d convolution behind conv1d/2d/3d (cross-correlation, as in every DL framework).

    Args:
        x: (N, C_in, *spatial) or (C_in, *spatial).
        weight: (C_out, C_in / groups, *kernel).
        bias: (C_out,) or None.
        stride, dilation: ints or one per spatial dim (>= 1).
        padding: zeros added on both sides, an int or one per dim (>= 0), or "valid" (none) or
            "same" (output size = input size; stride 1 only; an odd total pads one more on the right).
        groups: split the channels into `groups` independent convolutions.
    y[n, o, i] = bias[o] + sum_{c, k} x_pad[n, g(o)*C_in/groups + c, i*stride + k*dilation] * weight[o, c, k].

    Example:
        >>> conv(ember.ones(1, 2, 5), ember.ones(4, 2, 3), nd=1).shape
        (1, 4, 3)
    """
    _check_weight(op, weight, nd)
    kernel = weight.shape[2:]
    stride = ntuple(op, "stride", stride, nd)
    dilation = ntuple(op, "dilation", dilation, nd)
    if not isinstance(groups, int) or groups < 1:
        raise ShapeError(op, f"groups must be a positive int, got {groups!r}")
    extra = [0] * nd
    if padding == "valid":
        padding = (0,) * nd
    elif padding == "same":
        padding, extra = _same_padding(op, kernel, stride, dilation)
    else:
        padding = ntuple(op, "padding", padding, nd, minimum=0)

    def run(xb: Tensor) -> Tensor:
        if any(extra):
            xb = xb.pad([a for e in reversed(extra) for a in (0, e)])
        y = apply("conv", xb, weight, stride=stride, padding=padding, dilation=dilation, groups=groups)
        return _add_bias(op, y, bias)

    return batched(op, x, nd, run)


@amp.lower_precision
def conv_transpose(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
                   output_padding=0, groups: int = 1, dilation=1, *, nd: int, op: str = "conv_transpose") -> Tensor:
    """The N-d transposed convolution behind conv_transpose1d/2d/3d: the gradient of `conv` with respect
    to its input, used as an upsampling layer.

    Args:
        x: (N, C_in, *spatial) or (C_in, *spatial).
        weight: (C_in, C_out / groups, *kernel).
        bias: (C_out,) or None.
        stride, dilation: ints or one per spatial dim (>= 1).
        padding: cropped from both ends of the full output (the `padding` of the `conv` it inverts).
        output_padding: added to one end of the output size, 0 <= output_padding < max(stride, dilation),
            to pick among the input sizes a strided conv maps to the same output size.
        groups: split the channels into `groups` independent convolutions.
    y_full[n, g(c)*C_out/groups + o, i*stride + k*dilation] += x[n, c, i] * weight[c, o, k]; the output
    has (H - 1)*stride - 2*padding + dilation*(k - 1) + output_padding + 1 elements per dim.

    Example:
        >>> conv_transpose(ember.ones(1, 2, 4), ember.ones(2, 3, 3), stride=2, nd=1).shape
        (1, 3, 9)
    """
    _check_weight(op, weight, nd)
    stride = ntuple(op, "stride", stride, nd)
    dilation = ntuple(op, "dilation", dilation, nd)
    padding = ntuple(op, "padding", padding, nd, minimum=0)
    output_padding = ntuple(op, "output_padding", output_padding, nd, minimum=0)
    if not isinstance(groups, int) or groups < 1:
        raise ShapeError(op, f"groups must be a positive int, got {groups!r}")
    for p, s, d in zip(output_padding, stride, dilation):
        if p >= max(s, d):
            raise ShapeError(op, f"output_padding {output_padding} must be smaller than either stride {stride} "
                                 f"or dilation {dilation}")

    def run(xb: Tensor) -> Tensor:
        y = apply("conv_transpose", xb, weight, stride=stride, padding=padding, output_padding=output_padding,
                  dilation=dilation, groups=groups)
        return _add_bias(op, y, bias)

    return batched(op, x, nd, run)


def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """1-d convolution of (N, C_in, L) with weight (C_out, C_in / groups, k); see `conv` for the math.

    Example:
        >>> conv1d(ember.ones(1, 2, 5), ember.ones(4, 2, 3), padding="same").shape
        (1, 4, 5)
    """
    return conv(input, weight, bias, stride, padding, dilation, groups, nd=1, op="conv1d")


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """2-d convolution of (N, C_in, H, W) with weight (C_out, C_in / groups, kh, kw); see `conv`.

    Example:
        >>> conv2d(ember.ones(8, 1, 28, 28), ember.ones(32, 1, 3, 3), stride=2, padding=1).shape
        (8, 32, 14, 14)
    """
    return conv(input, weight, bias, stride, padding, dilation, groups, nd=2, op="conv2d")


def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """3-d convolution of (N, C_in, D, H, W) with weight (C_out, C_in / groups, kd, kh, kw); see `conv`.

    Example:
        >>> conv3d(ember.ones(1, 1, 4, 4, 4), ember.ones(2, 1, 3, 3, 3)).shape
        (1, 2, 2, 2, 2)
    """
    return conv(input, weight, bias, stride, padding, dilation, groups, nd=3, op="conv3d")


def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
                     output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """1-d transposed convolution, weight (C_in, C_out / groups, k); see `conv_transpose` for the math.

    Example:
        >>> conv_transpose1d(ember.ones(1, 2, 4), ember.ones(2, 3, 2), stride=2).shape
        (1, 3, 8)
    """
    return conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, nd=1,
                          op="conv_transpose1d")


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
                     output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """2-d transposed convolution, weight (C_in, C_out / groups, kh, kw); see `conv_transpose`.

    Example:
        >>> conv_transpose2d(ember.ones(1, 4, 7, 7), ember.ones(4, 2, 3, 3), stride=2, padding=1,
        ...                  output_padding=1).shape
        (1, 2, 14, 14)
    """
    return conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, nd=2,
                          op="conv_transpose2d")


def conv_transpose3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
                     output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """3-d transposed convolution, weight (C_in, C_out / groups, kd, kh, kw); see `conv_transpose`.

    Example:
        >>> conv_transpose3d(ember.ones(1, 2, 2, 2, 2), ember.ones(2, 1, 2, 2, 2), stride=2).shape
        (1, 1, 4, 4, 4)
    """
    return conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, nd=3,
                          op="conv_transpose3d")
