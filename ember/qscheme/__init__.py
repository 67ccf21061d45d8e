"""Quantization schemes and their NumPy references, below the ops so that primitives and kernels can
read a scheme: `QuantScheme` and its constructors (`int8`, `int4`, `int2`, `fp8_e4m3`, `fp8_e5m2`,
`mxfp4`, `nf4`), `qtype`, and `reference` (exact quantize, dequantize, packing). Users reach them
through `ember.quant` (docs/quantization.md).

Example:
    >>> from ember.qscheme import int8, reference
    >>> reference.quantize(np.ones((2, 3), np.float32), int8(axis=0))["scales"].shape
    (2, 1)
"""

from . import reference
from .scheme import (
    DOUBLE_QUANT_BLOCK, QType, QuantScheme, fp8_e4m3, fp8_e5m2, int2, int4, int8, mxfp4, nf4, qtype,
)

__all__ = ["QuantScheme", "QType", "qtype", "int8", "int4", "int2", "fp8_e4m3", "fp8_e5m2", "mxfp4", "nf4",
           "reference", "DOUBLE_QUANT_BLOCK"]
