"""Quantization: schemes, quantized tensors, quantized layers and the PTQ / QAT / dynamic recipes
(docs/quantization.md).

- Schemes: `int8()`, `int8(axis=0)` (per channel), `int4(block=32)`, `int4(block=32, affine=True)`,
  `int2(...)`, `fp8_e4m3()`, `fp8_e5m2()`, `mxfp4()`, `nf4(block=64, double_quant=True)`; `QuantScheme`.
- Tensors: `x.quantize(scheme)` / `ember.quantize` -> `QTensor`; `q.dequantize()`; `fake_quantize`.
- Layers: `QuantLinear`, `QuantEmbedding`, `QATLinear`.
- Recipes: `quantize_weights` (scales by "absmax" or "mse"; `default_embeddings`), `quantize_gptq`
  (GPTQ: `input_hessians`, `gptq_quantize`), `quantize_dynamic`, `quantize_static` (observers
  `MinMaxObserver`, `PercentileObserver`, `AbsMeanObserver`), `prepare_qat`; `weight_bytes`.

Example:
    >>> from ember import nn, quant
    >>> model = quant.quantize_weights(nn.Sequential(nn.Linear(64, 8)), quant.nf4())
    >>> type(model[0]).__name__
    'QuantLinear'
"""

from ..api.quantize import QTensor, dequantize, fake_quantize, quantize
from ..qscheme import QType, QuantScheme, fp8_e4m3, fp8_e5m2, int2, int4, int8, mxfp4, nf4, qtype
from .modules import QATLinear, QuantEmbedding, QuantLinear, quantized_linear
from .observers import AbsMeanObserver, MinMaxObserver, PercentileObserver
from .gptq import gptq_quantize
from .recipes import (
    default_embeddings, input_hessians, prepare_qat, quantize_dynamic, quantize_gptq, quantize_static, quantize_weights,
    weight_bytes,
)

__all__ = [
    "QuantScheme", "QType", "qtype", "int8", "int4", "int2", "fp8_e4m3", "fp8_e5m2", "mxfp4", "nf4",
    "QTensor", "quantize", "dequantize", "fake_quantize", "QuantLinear", "QuantEmbedding", "QATLinear",
    "quantized_linear", "MinMaxObserver", "PercentileObserver", "AbsMeanObserver", "quantize_weights",
    "quantize_dynamic", "quantize_static", "prepare_qat", "weight_bytes", "default_embeddings", "input_hessians",
    "quantize_gptq", "gptq_quantize",
]
