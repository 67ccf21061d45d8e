"""Convolution layers: Conv1d/2d/3d and ConvTranspose1d/2d/3d over `ember.nn.functional`'s conv ops.

Weights use PyTorch's layout, so state dicts move between the two without transposes:
Conv weight (out_channels, in_channels / groups, *kernel_size); ConvTranspose weight
(in_channels, out_channels / groups, *kernel_size); bias (out_channels,). Both are initialized like
PyTorch: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = weight.shape[1] * prod(kernel_size).

Example:
    >>> conv = Conv2d(1, 32, 3, padding=1)
    >>> conv(ember.randn(8, 1, 28, 28)).shape
    (8, 32, 28, 28)
"""

from __future__ import annotations

import math

import numpy as np

from ..api.creation import from_numpy
from ..errors import ShapeError
from ..tensor import Tensor
from . import init
from .module import Module
from .functional.args import ntuple
from .functional.conv import conv, conv_transpose
from .param import Param

PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


class _ConvNd(Module):
    """What Conv and ConvTranspose share: hyperparameters and PyTorch's initialization."""

    nd: int
    name: str

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride, padding, dilation, groups: int,
                 bias: bool, weight_shape_of, device, dtype) -> None:
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ShapeError(self.name, f"groups={groups} must divide in_channels={in_channels} and "
                                        f"out_channels={out_channels}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = ntuple(self.name, "kernel_size", kernel_size, self.nd)
        self.stride = ntuple(self.name, "stride", stride, self.nd)
        self.padding = padding if isinstance(padding, str) else ntuple(self.name, "padding", padding, self.nd, 0)
        self.dilation = ntuple(self.name, "dilation", dilation, self.nd)
        self.groups = groups
        shape = weight_shape_of(in_channels, out_channels, groups) + self.kernel_size
        fan_in = shape[1] * math.prod(self.kernel_size)
        gain = 1.0 / math.sqrt(3.0)  # kaiming_uniform with this gain is U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        self.weight = Param(init.kaiming_uniform(shape, fan_in, gain, device, dtype))
        self.bias = Param(init.kaiming_uniform((out_channels,), fan_in, gain, device, dtype)) if bias else None

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, dilation={self.dilation}, groups={self.groups}, "
                f"bias={self.bias is not None}")


class _Conv(_ConvNd):
    """N-d convolution layer; Conv1d/2d/3d fix N."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", device=None, dtype=None) -> None:
        if padding_mode not in PADDING_MODES:
            raise ValueError(f"{self.name}: unknown padding_mode {padding_mode!r}; known: {PADDING_MODES}")
        if isinstance(padding, str) and padding not in ("same", "valid"):
            raise ValueError(f"{self.name}: padding must be 'same', 'valid' or ints, got {padding!r}")
        if isinstance(padding, str) and padding_mode != "zeros":
            raise ValueError(f"{self.name}: padding={padding!r} needs padding_mode='zeros'")
        self.padding_mode = padding_mode
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         lambda cin, cout, g: (cout, cin // g), device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        if self.padding_mode == "zeros":
            return conv(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups,
                        nd=self.nd, op=self.name)
        # Other modes pad explicitly (the conv itself then pads nothing), as PyTorch does.
        if self.padding_mode == "circular":
            x = _wrap(self.name, x, self.padding)
        else:
            x = x.pad([w for p in reversed(self.padding) for w in (p, p)], mode=self.padding_mode)
        return conv(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups, nd=self.nd, op=self.name)


def _wrap(op: str, x: Tensor, padding) -> Tensor:
    """Circular padding of the trailing spatial dims: each side continues with the other end's values."""
    for axis, p in enumerate(padding):
        dim = x.ndim - len(padding) + axis
        n = x.shape[dim]
        if p > n:
            raise ShapeError(op, f"circular padding {p} is larger than the dim size {n} of input {x.shape}")
        if p:
            x = x.index_select(dim, from_numpy(np.arange(-p, n + p) % n, device=x.device))
    return x


class Conv1d(_Conv):
    """1-d convolution: y[n, o, i] = bias[o] + sum_{c, k} x_pad[n, c, i*stride + k*dilation] * weight[o, c, k].

    Args:
        in_channels, out_channels: channels of the input (N, C_in, L) and the output (N, C_out, L_out).
        kernel_size, stride, dilation: an int or one per spatial dim.
        padding: an int or one per dim, or "valid" / "same" (stride 1).
        groups: independent convolutions over channel groups (in and out channels divisible by it).
        bias: whether to add a learned bias.
        padding_mode: "zeros", "reflect", "replicate" or "circular" (wrap around).
    weight: (out_channels, in_channels / groups, *kernel_size), PyTorch's layout.

    Example:
        >>> Conv1d(4, 8, 3)(ember.randn(2, 4, 10)).shape
        (2, 8, 8)
    """

    nd, name = 1, "Conv1d"


class Conv2d(_Conv):
    """2-d convolution of (N, C_in, H, W); arguments and math as `Conv1d`, one value per spatial dim.

    Example:
        >>> Conv2d(3, 16, (3, 5), stride=2, padding=(1, 2))(ember.randn(2, 3, 32, 32)).shape
        (2, 16, 16, 16)
    """

    nd, name = 2, "Conv2d"


class Conv3d(_Conv):
    """3-d convolution of (N, C_in, D, H, W); arguments and math as `Conv1d`.

    Example:
        >>> Conv3d(2, 4, 3, padding="same")(ember.randn(1, 2, 5, 6, 7)).shape
        (1, 4, 5, 6, 7)
    """

    nd, name = 3, "Conv3d"


class _ConvTranspose(_ConvNd):
    """N-d transposed convolution layer; ConvTranspose1d/2d/3d fix N."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 groups: int = 1, bias: bool = True, dilation=1, device=None, dtype=None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         lambda cin, cout, g: (cin, cout // g), device, dtype)
        self.output_padding = ntuple(self.name, "output_padding", output_padding, self.nd, 0)

    def forward(self, x: Tensor, output_size=None) -> Tensor:
        """`output_size` (the trailing spatial sizes wanted) picks the output_padding that gives them."""
        extra = self.output_padding if output_size is None else self._output_padding(x, output_size)
        return conv_transpose(x, self.weight, self.bias, self.stride, self.padding, extra, self.groups,
                              self.dilation, nd=self.nd, op=self.name)

    def _output_padding(self, x: Tensor, output_size) -> tuple[int, ...]:
        want = tuple(output_size)[-self.nd:]
        smallest = tuple((n - 1) * s - 2 * p + d * (k - 1) + 1 for n, s, p, d, k in
                         zip(x.shape[-self.nd:], self.stride, self.padding, self.dilation, self.kernel_size))
        room = tuple(max(s, d) - 1 for s, d in zip(self.stride, self.dilation))
        extra = tuple(w - m for w, m in zip(want, smallest))
        if len(want) != self.nd or any(not 0 <= e <= r for e, r in zip(extra, room)):
            largest = tuple(m + r for m, r in zip(smallest, room))
            raise ShapeError(self.name, f"output_size {tuple(output_size)} is not reachable from input {x.shape}: "
                                        f"sizes from {smallest} to {largest}")
        return extra

    def extra_repr(self) -> str:
        return super().extra_repr() + f", output_padding={self.output_padding}"


class ConvTranspose1d(_ConvTranspose):
    """1-d transposed convolution (the gradient of Conv1d with respect to its input), an upsampling layer:
    y_full[n, o, i*stride + k*dilation] += x[n, c, i] * weight[c, o, k], cropped by `padding` at both
    ends, plus `output_padding` at the end; L_out = (L - 1)*stride - 2*padding + dilation*(k - 1)
    + output_padding + 1.

    Args:
        in_channels, out_channels: channels of the input (N, C_in, L) and the output.
        kernel_size, stride, padding, output_padding, dilation: an int or one per spatial dim;
            0 <= output_padding < max(stride, dilation).
        groups: independent convolutions over channel groups.
        bias: whether to add a learned bias.
    weight: (in_channels, out_channels / groups, *kernel_size), PyTorch's layout.

    Example:
        >>> ConvTranspose1d(4, 2, 2, stride=2)(ember.randn(1, 4, 5)).shape
        (1, 2, 10)
    """

    nd, name = 1, "ConvTranspose1d"


class ConvTranspose2d(_ConvTranspose):
    """2-d transposed convolution of (N, C_in, H, W); arguments and math as `ConvTranspose1d`.

    Example:
        >>> up = ConvTranspose2d(8, 4, 3, stride=2, padding=1)
        >>> up(ember.randn(1, 8, 7, 7), output_size=(14, 14)).shape
        (1, 4, 14, 14)
    """

    nd, name = 2, "ConvTranspose2d"


class ConvTranspose3d(_ConvTranspose):
    """3-d transposed convolution of (N, C_in, D, H, W); arguments and math as `ConvTranspose1d`.

    Example:
        >>> ConvTranspose3d(2, 2, 2, stride=2)(ember.randn(1, 2, 2, 3, 4)).shape
        (1, 2, 4, 6, 8)
    """

    nd, name = 3, "ConvTranspose3d"
