"""`Linear` and `Identity`."""

from __future__ import annotations

import math

from ..tensor import Tensor
from . import init
from .module import Module
from .param import Param


class Linear(Module):
    """`y = x @ weight + bias`.

    Args:
        in_features: size of the last dim of the input.
        out_features: size of the last dim of the output.
        bias: whether to add a learned bias.
    The weight is stored as (in_features, out_features), Burn's layout (PyTorch stores the transpose;
    `ember.store` transposes on import). Both are initialized U(-1/sqrt(in), 1/sqrt(in)) like PyTorch.

    Example:
        >>> Linear(4, 2)(ember.ones(3, 4)).shape
        (3, 2)
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None) -> None:
        self.in_features = in_features
        self.out_features = out_features
        bound_gain = 1.0 / math.sqrt(3.0)
        self.weight = Param(init.kaiming_uniform((in_features, out_features), in_features, bound_gain,
                                                 device, dtype))
        self.bias = Param(init.kaiming_uniform((out_features,), in_features, bound_gain, device, dtype)) \
            if bias else None

    def forward(self, x: Tensor) -> Tensor:
        y = x @ self.weight
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, bias={self.bias is not None}"


class Identity(Module):
    """Returns its input unchanged (a placeholder where a layer is optional).

    Example:
        >>> Identity()(x) is x
        True
    """

    def forward(self, x: Tensor) -> Tensor:
        return x
