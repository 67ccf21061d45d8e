"""Quantized layers: `QuantLinear` and `QuantEmbedding` (a frozen `QTensor` weight under the name
`weight`, so state dicts keep their keys) and `QATLinear` (a trainable `Linear` whose forward
fake-quantizes its weight, and optionally its input, for quantization-aware training).

An input scheme on `QuantLinear` quantizes activations: with `input_scale` fixed by calibration
(static), else from each row of the input (`dynamic=True`, per token).

Example:
    >>> layer = QuantLinear.from_linear(nn.Linear(64, 8), ember.quant.int4(block=32))
    >>> layer(ember.ones(2, 64)).shape
    (2, 8)
"""

from __future__ import annotations

from ..api.creation import tensor
from ..api.quantize import QTensor, fake_quantize, quantize
from ..dtype import bf16, f16, f32
from ..errors import QuantSchemeError
from ..nn.embedding import Embedding
from ..nn.functional.embedding import embedding
from ..nn.linear import Linear, linear, quant_linear
from ..nn.module import Module
from ..nn.param import Param
from ..qscheme import QuantScheme
from ..tensor import Tensor


def quantized_linear(x: Tensor, weight: QTensor, bias: Tensor | None = None) -> Tensor:
    """`x @ dequantize(weight)^T + bias` for a weight (out, in) quantized along `in`, by the quantized
    matmul (`F.quant_linear`: the packed weight is never dequantized in full, and its input gradient,
    which QLoRA trains through, neither). An f64 input, which the kernels do not take, and a weight with
    per-channel scales along `in` (stored in (in, out) order, not the kernels' layout) are multiplied by
    the dequantized weight."""
    scheme = weight.scheme
    if x.dtype not in (f32, f16, bf16) or (scheme.level == "channel" and scheme.axis % weight.ndim != 0):
        return linear(x, weight.dequantize(x.dtype), bias)
    args = weight.kernel_args()
    return quant_linear(x, args["values"], args["scales"], args["zeros"], code=args["code"], block=args["block"],
                        in_features=args["k"], out_features=weight.shape[0], bias=bias)


class QuantLinear(Module):
    """A `Linear` whose weight is a frozen `QTensor` (out_features, in_features); the bias stays float.

    Args:
        weight: the quantized weight.
        bias: the bias, or None.
        input_scheme: a scheme for the input activations, or None (weight-only).
        input_scale, input_zero: the calibrated per-tensor scale (and affine zero point) of the input;
            with `input_scheme` and no scale, each row (token) is quantized with its own (`dynamic`).
    """

    def __init__(self, weight: QTensor, bias: Param | None = None, input_scheme: QuantScheme | None = None,
                 input_scale: float | None = None, input_zero: int | None = None) -> None:
        if weight.ndim != 2:
            raise QuantSchemeError(f"{weight.scheme}: QuantLinear needs a 2-d weight, got shape {weight.shape}")
        self.out_features, self.in_features = weight.shape
        self.weight = weight
        self.bias = bias
        self.input_scheme = input_scheme
        device = weight.device.inner
        self.input_scale = None if input_scale is None else tensor([input_scale], device=device)
        self.input_zero = None if input_zero is None else tensor([float(input_zero)], device=device)

    @classmethod
    def from_linear(cls, layer: Linear, scheme: QuantScheme | QTensor, method: str = "absmax",
                    **input_options) -> "QuantLinear":
        """`layer` with its weight quantized by `scheme` with scales by `method` ("absmax", "mse"), or
        replaced by a given QTensor (GPTQ's); the bias is kept, frozen."""
        bias = None if layer.bias is None else Param(layer.bias.value, frozen=True)
        weight = scheme if isinstance(scheme, QTensor) else quantize(layer.weight.value, scheme, method=method)
        return cls(weight, bias, **input_options)

    def forward(self, x: Tensor) -> Tensor:
        return quantized_linear(self._input(x), self.weight, self.bias)

    def _input(self, x: Tensor) -> Tensor:
        if self.input_scheme is None:
            return x
        if self.input_scale is not None:
            q = quantize(x, self.input_scheme, self.input_scale, self.input_zero)
        else:
            scheme = _per_token(self.input_scheme, x.shape[-1])
            q = quantize(x, scheme)
        return q.dequantize(x.dtype).to(x.device)

    def extra_repr(self) -> str:
        act = "" if self.input_scheme is None else (
            f", input={self.input_scheme}" + (" static" if self.input_scale is not None else " per token"))
        return f"in={self.in_features}, out={self.out_features}, weight={self.weight.scheme}{act}"


def _per_token(scheme: QuantScheme, k: int) -> QuantScheme:
    """`scheme` with one scale per row of a last axis of `k` (dynamic per-token quantization)."""
    fields = scheme.to_dict() | {"level": "block", "block": max(k, 1), "axis": None}
    return QuantScheme(**fields)


class QuantEmbedding(Module):
    """An `Embedding` whose table is a frozen `QTensor` (num_embeddings, embedding_dim). Rows are picked
    from the quantized parts before dequantizing where the scheme keeps rows apart (per tensor, per
    block, per channel axis 0), so only the looked-up rows are widened."""

    def __init__(self, weight: QTensor, padding_idx: int | None = None) -> None:
        if weight.ndim != 2:
            raise QuantSchemeError(f"{weight.scheme}: QuantEmbedding needs a 2-d table, got shape {weight.shape}")
        self.num_embeddings, self.embedding_dim = weight.shape
        self.weight = weight
        self.padding_idx = padding_idx

    @classmethod
    def from_embedding(cls, layer: Embedding, scheme: QuantScheme, method: str = "absmax") -> "QuantEmbedding":
        return cls(quantize(layer.weight.value, scheme, method=method), layer.padding_idx)

    def forward(self, ids: Tensor) -> Tensor:
        q = self.weight
        scheme = q.scheme
        if scheme.level == "channel" and scheme.axis % 2 == 1 or scheme.double_quant:
            return embedding(ids.to(q.device.inner), q.dequantize())
        flat = ids.to(q.device.inner).reshape(-1)
        parts = {name: part if scheme.level == "tensor" and name != "values" else part.index_select(0, flat)
                 for name, part in q.parts.items()}
        rows = QTensor(scheme, (flat.shape[0], self.embedding_dim), parts)
        return rows.dequantize().reshape(tuple(ids.shape) + (self.embedding_dim,))

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, weight={self.weight.scheme}"


class QATLinear(Linear):
    """A `Linear` for quantization-aware training: the forward fake-quantizes the weight with `scheme`
    (and the input with `input_scheme`, per token), gradients pass straight through. The parameters
    are the layer's own, under the same names; `quantize_weights` turns it into a `QuantLinear`."""

    def __init__(self, layer: Linear, scheme: QuantScheme, input_scheme: QuantScheme | None = None) -> None:
        self.in_features, self.out_features = layer.in_features, layer.out_features
        self.weight, self.bias = layer.weight, layer.bias
        self.scheme, self.input_scheme = scheme, input_scheme

    def forward(self, x: Tensor) -> Tensor:
        if self.input_scheme is not None:
            x = fake_quantize(x, _per_token(self.input_scheme, x.shape[-1]))
        return linear(x, fake_quantize(self.weight, self.scheme), self.bias)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", qat={self.scheme}"


__all__ = ["QuantLinear", "QuantEmbedding", "QATLinear", "quantized_linear"]
