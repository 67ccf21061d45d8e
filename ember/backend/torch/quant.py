"""Rows of `quant_matmul` and `int_matmul` on torch ops.

torch has no product with ember's packed weights, so `quant_matmul` dequantizes the weight with torch
ops on the device (shifts and masks, the code's table of values, the scales per block) and multiplies
in f32; `int_matmul` multiplies in f64, exact for int8 products (each at most 2^14 in magnitude) summed
over fewer than 2^39 terms, and wraps to int32 as the cube kernel and the NumPy reference do.

Example:
    >>> values, scales = torch.tensor([[0x21]], dtype=torch.uint8), torch.tensor([1.0])
    >>> ROWS["quant_matmul"](Aval((1, 1), f32), torch.ones(1, 2), values, scales, code="int4", block=2, k=2,
    ...                      n=1, transpose=False).tolist()
    [[3.0]]
"""

from __future__ import annotations

import torch

from ...ops.quant_matmul import CODES, code_table, ue8m0_table
from .convert import tdtype


def _table(table, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(table.copy()).to(device)


def _per_column(parts: torch.Tensor, k: int, block: int) -> torch.Tensor:
    """Per-block parts (n, nblocks), or (1,) for the whole weight, spread over its k columns."""
    if parts.dim() == 1:
        return parts.reshape(1, 1)
    return parts[:, torch.arange(k, device=parts.device) // block]


def _dequantize(values, scales, zeros, code: str, block: int, k: int) -> torch.Tensor:
    bits = CODES[code][0]
    shifts = torch.arange(0, 8, bits, device=values.device, dtype=torch.int32)
    fields = (values.to(torch.int32).unsqueeze(-1) >> shifts) & ((1 << bits) - 1)
    codes = _table(code_table(code), values.device)[fields.reshape(values.shape[0], -1)[:, :k].long()]
    s = _table(ue8m0_table(), values.device)[scales.long()] if scales.dtype == torch.uint8 else scales.float()
    if zeros is not None:
        codes = codes - _per_column(zeros.float(), k, block)
    return _per_column(s, k, block) * codes


def _quant_matmul(out, x, values, scales, zeros=None, *, code, block, k, n, transpose):
    w = _dequantize(values, scales, zeros, code, block, k)
    return torch.matmul(x.float(), w if transpose else w.T).to(tdtype(out.dtype))


def _int_matmul(out, a, b):
    return torch.matmul(a.double(), b.double().T).to(torch.int64).to(torch.int32)


ROWS = {"quant_matmul": _quant_matmul, "int_matmul": _int_matmul}
"""Primitive name -> `row(out_aval, *tensors, **params) -> tensor`."""
