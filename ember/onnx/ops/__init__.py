"""ONNX op functions by family; `OPS[(domain, op_type)]` is the table the graph runner reads.

Example:
    >>> ("", "Conv") in OPS
    True
"""

from . import (activation, control, elementwise, index, nn, quant, reduce, resize, rnn, shape,  # noqa: F401
               detection, linalg, ml, signal, strings, training)  # (they fill OPS)
from .registry import FAMILY, OPS, Call, op

__all__ = ["OPS", "FAMILY", "Call", "op"]
