"""`Linear`, `Bilinear` and `Identity`; `linear`, and `quant_linear` / `int_linear` for quantized weights."""

from __future__ import annotations

import math

from .. import amp
from ..api._common import apply
from ..errors import ShapeError
from ..tensor import Tensor
from . import init
from .module import Module
from .param import Param


@amp.lower_precision
def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """`x @ weight^T + bias`, PyTorch's `F.linear` (weight (out, in), bias (out,) or None).

    Example:
        >>> linear(ember.ones(3, 4), ember.ones(2, 4)).shape
        (3, 2)
    """
    y = x @ weight.T
    return y + bias if bias is not None else y


def quant_linear(x: Tensor, values: Tensor, scales: Tensor, zeros: Tensor | None = None, *, code: str, block: int,
                 in_features: int, out_features: int, bias: Tensor | None = None) -> Tensor:
    """`x @ W^T + bias` for a quantized weight W (out_features, in_features) given by its parts: `values`
    (uint8 codes packed along in_features), `scales` (per block of `block` codes, or (1,)) and, for the
    affine codes, `zeros` (docs/quant-kernels.md). The weight is never dequantized in full; the result
    has x's dtype (f32, f16 or bf16), accumulated in f32; the gradient flows to x (and bias) only.

    Example:
        >>> values = ember.tensor([[0x21]], dtype=ember.uint8); scales = ember.tensor([1.0])
        >>> quant_linear(ember.ones(1, 2), values, scales, code="int4", block=2, in_features=2, out_features=1).tolist()
        [[3.0]]
    """
    parts = (values, scales) if zeros is None else (values, scales, zeros)
    y = apply("quant_matmul", x, *parts, code=code, block=int(block), k=int(in_features), n=int(out_features),
              transpose=False)
    return y + bias if bias is not None else y


def int_linear(x: Tensor, weight: Tensor) -> Tensor:
    """`x @ weight^T` of int8 tensors x (..., in) and weight (out, in), exact in int32 (no gradient).

    Example:
        >>> int_linear(ember.full((1, 3), -128, dtype=ember.int8), ember.full((2, 3), -128, dtype=ember.int8)).tolist()
        [[49152, 49152]]
    """
    return apply("int_matmul", x, weight)


class Linear(Module):
    """`y = x @ weight^T + bias`.

    Args:
        in_features: size of the last dim of the input.
        out_features: size of the last dim of the output.
        bias: whether to add a learned bias.
    The weight is stored as (out_features, in_features), PyTorch's layout, so PyTorch and Hugging Face
    state dicts load as they are. The transpose is a view the matmul reads through its strides (no
    copy). Weight and bias are initialized U(-1/sqrt(in), 1/sqrt(in)) like PyTorch.

    Example:
        >>> Linear(4, 2)(ember.ones(3, 4)).shape
        (3, 2)
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None) -> None:
        self.in_features = in_features
        self.out_features = out_features
        bound_gain = 1.0 / math.sqrt(3.0)
        self.weight = Param(init.kaiming_uniform((out_features, in_features), in_features, bound_gain,
                                                 device, dtype))
        self.bias = Param(init.kaiming_uniform((out_features,), in_features, bound_gain, device, dtype)) \
            if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)

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


class Bilinear(Module):
    """`y_k = x1 @ weight[k] @ x2 + bias_k`, a bilinear form per output feature.

    Args:
        in1_features: size of the last dim of `x1`.
        in2_features: size of the last dim of `x2`.
        out_features: size of the last dim of the output.
        bias: whether to add a learned bias.
    The weight is stored as (out_features, in1_features, in2_features), PyTorch's layout. Weight and
    bias are initialized U(-1/sqrt(in1), 1/sqrt(in1)) like PyTorch.
    Inputs share their leading dims: (*, in1) and (*, in2) give (*, out).

    Example:
        >>> Bilinear(3, 4, 2)(ember.ones(5, 3), ember.ones(5, 4)).shape
        (5, 2)
    """

    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True,
                 device=None, dtype=None) -> None:
        self.in1_features = in1_features
        self.in2_features = in2_features
        self.out_features = out_features
        bound_gain = 1.0 / math.sqrt(3.0)
        self.weight = Param(init.kaiming_uniform((out_features, in1_features, in2_features), in1_features,
                                                 bound_gain, device, dtype))
        self.bias = Param(init.kaiming_uniform((out_features,), in1_features, bound_gain, device, dtype)) \
            if bias else None

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        if x1.shape[:-1] != x2.shape[:-1] or x1.shape[-1:] != (self.in1_features,) or \
                x2.shape[-1:] != (self.in2_features,):
            raise ShapeError("Bilinear", f"expected inputs (*, {self.in1_features}) and (*, {self.in2_features}) "
                                         f"with the same leading dims, got {x1.shape} and {x2.shape}")
        lead = x1.shape[:-1]
        a = x1.reshape(-1, self.in1_features)
        b = x2.reshape(-1, self.in2_features)
        # (B, in1) @ (in1, out * in2) -> (B, out, in2), then contract in2 with x2.
        w = self.weight.permute(1, 0, 2).reshape(self.in1_features, -1)
        y = ((a @ w).reshape(-1, self.out_features, self.in2_features) * b.unsqueeze(1)).sum(dim=2)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (f"in1={self.in1_features}, in2={self.in2_features}, out={self.out_features}, "
                f"bias={self.bias is not None}")
