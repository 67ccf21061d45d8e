"""Pooling layers: MaxPool1d/2d, AvgPool1d/2d, AdaptiveAvgPool1d/2d, AdaptiveMaxPool1d/2d, over the
functional forms in `ember.nn.functional` (see there for the math). They have no parameters.

Example:
    >>> MaxPool2d(2)(ember.randn(8, 16, 28, 28)).shape
    (8, 16, 14, 14)
"""

from __future__ import annotations

from ..tensor import Tensor
from .module import Module
from .functional.adaptive import adaptive_avg_pool, adaptive_max_pool
from .functional.pool import avg_pool, max_pool


class _MaxPool(Module):
    nd: int
    name: str

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices: bool = False,
                 ceil_mode: bool = False) -> None:
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def forward(self, x: Tensor):
        return max_pool(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                        self.return_indices, nd=self.nd, op=self.name)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPool):
    """Max over sliding windows of (N, C, L): y[n, c, i] = max_k x_pad[n, c, i*stride + k*dilation].

    Args:
        kernel_size: window size; stride: step (default kernel_size); padding: -inf on both sides (at
            most half the kernel); dilation: spacing inside a window; ceil_mode: round the output size
            up; return_indices: also return each maximum's flat index in its input plane.

    Example:
        >>> MaxPool1d(2)(ember.tensor([[[1.0, 3.0, 2.0, 0.0]]])).tolist()
        [[[3.0, 2.0]]]
    """

    nd, name = 1, "MaxPool1d"


class MaxPool2d(_MaxPool):
    """Max over sliding windows of (N, C, H, W); arguments as `MaxPool1d`, ints or pairs.

    Example:
        >>> MaxPool2d(3, stride=2, padding=1)(ember.randn(1, 4, 8, 8)).shape
        (1, 4, 4, 4)
    """

    nd, name = 2, "MaxPool2d"


class _AvgPool(Module):
    nd: int
    name: str

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override: int | None = None) -> None:
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, x: Tensor) -> Tensor:
        return avg_pool(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad,
                        self.divisor_override, nd=self.nd, op=self.name)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPool):
    """Mean over sliding windows of (N, C, L): y[n, c, i] = sum_k x_pad[n, c, i*stride + k] / divisor.

    Args:
        kernel_size: window size; stride: step (default kernel_size); padding: zeros on both sides (at
            most half the kernel); ceil_mode: round the output size up; count_include_pad: count padded
            zeros in the divisor; divisor_override: divide by this instead.

    Example:
        >>> AvgPool1d(2)(ember.tensor([[[1.0, 3.0, 2.0, 0.0]]])).tolist()
        [[[2.0, 1.0]]]
    """

    nd, name = 1, "AvgPool1d"


class AvgPool2d(_AvgPool):
    """Mean over sliding windows of (N, C, H, W); arguments as `AvgPool1d`, ints or pairs.

    Example:
        >>> AvgPool2d(2)(ember.ones(1, 1, 4, 4)).shape
        (1, 1, 2, 2)
    """

    nd, name = 2, "AvgPool2d"


class _AdaptivePool(Module):
    nd: int
    name: str

    def __init__(self, output_size) -> None:
        self.output_size = output_size

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptivePool):
    """Mean over windows chosen to give `output_size`: output i of a dim of length n pools
    [floor(i*n/m), ceil((i+1)*n/m)).

    Args:
        output_size: the output length m (None keeps the input's).

    Example:
        >>> AdaptiveAvgPool1d(2)(ember.tensor([[[1.0, 2.0, 3.0]]])).tolist()
        [[[1.5, 2.5]]]
    """

    nd, name = 1, "AdaptiveAvgPool1d"

    def forward(self, x: Tensor) -> Tensor:
        return adaptive_avg_pool(x, self.output_size, nd=self.nd, op=self.name)


class AdaptiveAvgPool2d(AdaptiveAvgPool1d):
    """`AdaptiveAvgPool1d` over (N, C, H, W); `output_size` an int or (h, w), None keeping a size.

    Example:
        >>> AdaptiveAvgPool2d(1)(ember.randn(2, 8, 7, 7)).shape
        (2, 8, 1, 1)
    """

    nd, name = 2, "AdaptiveAvgPool2d"


class AdaptiveMaxPool1d(_AdaptivePool):
    """Max over the windows of `AdaptiveAvgPool1d`.

    Args:
        output_size: the output length (None keeps the input's).
        return_indices: also return each maximum's flat index in its input plane.

    Example:
        >>> AdaptiveMaxPool1d(2)(ember.tensor([[[1.0, 3.0, 2.0]]])).tolist()
        [[[3.0, 3.0]]]
    """

    nd, name = 1, "AdaptiveMaxPool1d"

    def __init__(self, output_size, return_indices: bool = False) -> None:
        super().__init__(output_size)
        self.return_indices = return_indices

    def forward(self, x: Tensor):
        return adaptive_max_pool(x, self.output_size, self.return_indices, nd=self.nd, op=self.name)


class AdaptiveMaxPool2d(AdaptiveMaxPool1d):
    """`AdaptiveMaxPool1d` over (N, C, H, W); `output_size` an int or (h, w).

    Example:
        >>> AdaptiveMaxPool2d((2, 3))(ember.randn(2, 8, 7, 7)).shape
        (2, 8, 2, 3)
    """

    nd, name = 2, "AdaptiveMaxPool2d"
