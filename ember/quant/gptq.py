"""GPTQ (Frantar et al. 2022): a weight's columns quantized one after another, each column's rounding
error spread over the columns not yet quantized through the Cholesky factor of the inverse of the
layer's input Hessian H = X^T X, so that the layer's output on inputs like X, not its weight, stays
close. `gptq_quantize(weight, hessian, scheme)` does one (out, in) weight; `quantize_gptq` (recipes)
collects each Linear's H on calibration batches and calls it.

The solve runs on the host in NumPy float64 (an offline step, once per layer): H is damped by
`damp * mean(diag H)`, inputs never seen (diag 0) get a unit diagonal, columns optionally go in order
of decreasing diag H (`act_order`); errors are applied `block_size` columns at a time. Codes and scales
are the scheme's own (`reference.qparams`, `reference.codes`): per block, a block's scale is made from
the weights as updated when its first column comes up (with `act_order`, from the original weights:
"static groups"); per channel and per tensor from the original weights. docs/quantization.md, "GPTQ".

Example:
    >>> q = gptq_quantize(layer.weight.value, x.T @ x, int4(block=32))
"""

from __future__ import annotations

import numpy as np

from ..api.quantize import QTensor
from ..errors import QuantSchemeError
from ..qscheme import QuantScheme, reference
from ..tensor import Tensor, from_host


def gptq_quantize(weight: Tensor, hessian: Tensor | np.ndarray, scheme: QuantScheme, damp: float = 0.01,
                  act_order: bool = False, block_size: int = 128, method: str = "absmax") -> QTensor:
    """`weight` (out_features, in_features) quantized with `scheme` by GPTQ against the input Hessian
    `hessian` (in_features, in_features; X^T X, any positive multiple); `method` makes the scales
    ("absmax" or "mse"). The QTensor is on `weight`'s device."""
    w = np.asarray(weight.detach().numpy(), np.float32)
    h = np.array(hessian.numpy() if isinstance(hessian, Tensor) else hessian, np.float64)
    rows, k = _check(w.shape, h.shape, scheme, method, damp, block_size)
    g = scheme.block_for(k)
    dead = np.diag(h) == 0
    h[dead, dead] = 1.0
    order = np.argsort(-np.diag(h), kind="stable") if act_order else np.arange(k)
    h = h[np.ix_(order, order)] + damp * np.mean(np.diag(h)) * np.eye(k)
    try:
        u = np.linalg.cholesky(np.linalg.inv(h)).T  # upper: inv(H) = U^T U
    except np.linalg.LinAlgError:
        raise QuantSchemeError(f"{scheme}: GPTQ: the damped Hessian of a weight of shape {w.shape} is not "
                               f"positive definite (damp={damp}); raise damp") from None
    static = scheme.level != "block" or act_order
    nb = -(-k // g)
    if static:
        scale, inv, zero, parts = reference.qparams(reference.blocks_of(w, g), scheme, method)
    else:  # filled block by block from the updated weights
        scale, inv, zero = (np.zeros((rows, nb, 1), np.float32) for _ in range(3))
        parts = {}
    table = reference.code_values(scheme)
    codes = np.zeros((rows, k), np.uint8)
    step = block_size if static else max(block_size // g, 1) * g
    work = w.astype(np.float64)[:, order]
    for start in range(0, k, step):
        stop = min(start + step, k)
        part = work[:, start:stop].copy()
        errors = np.zeros_like(part)
        for j in range(start, stop):
            col = order[j]
            b = min(col // g, scale.shape[1] - 1)  # per tensor: the one scale
            if not static and col % g == 0:
                s, i, z, p = reference.qparams(part[:, None, j - start:j - start + g].astype(np.float32), scheme, method)
                scale[:, b], inv[:, b], zero[:, b] = s[:, 0], i[:, 0], z if np.isscalar(z) else z[:, 0]
                for name, value in p.items():
                    parts.setdefault(name, np.zeros((rows, nb, 1), value.dtype))[:, b] = value[:, 0]
            x = part[:, j - start].astype(np.float32)
            c = reference.codes(x, inv[:, b, 0], _column(zero, b), scheme)
            q = scale[:, b, 0] * (table[c] - _column(zero, b))
            codes[:, col] = c
            err = (part[:, j - start] - q) / u[j, j]
            part[:, j - start:] -= np.outer(err, u[j, j:stop])
            errors[:, j - start] = err
        work[:, stop:] -= errors @ u[start:stop, stop:]
    shapes = scheme.parts(w.shape)
    out = {"values": reference.pack(codes, scheme.bits)} | {n: p.reshape(shapes[n]) for n, p in parts.items()}
    if scheme.double_quant:
        out.update(reference.double_quantize(out["scales"]))
    device = weight.device.inner
    return QTensor(scheme, w.shape, {n: from_host(np.ascontiguousarray(p), device) for n, p in out.items()})


def _column(zero, b: int):
    """The zero points of block `b` of every row (0 for symmetric schemes)."""
    return np.float32(0) if np.isscalar(zero) else zero[:, b, 0]


def _check(shape: tuple, hessian: tuple, scheme: QuantScheme, method: str, damp: float, block_size: int):
    scheme.check(shape)
    reference.check_method(method, scheme, shape)
    if len(shape) != 2 or hessian != (shape[1], shape[1]):
        raise QuantSchemeError(f"{scheme}: GPTQ takes an (out, in) weight and an (in, in) Hessian, got "
                               f"shapes {shape} and {hessian}")
    if scheme.level == "channel" and scheme.axis % 2 != 0:
        raise QuantSchemeError(f"{scheme}: GPTQ quantizes along the input axis: per channel needs axis=0 "
                               f"(one scale per output row), weight shape {shape}")
    if not damp > 0 or block_size < 1:
        raise QuantSchemeError(f"{scheme}: GPTQ needs damp > 0 and block_size >= 1, got {damp} and {block_size}")
    return shape
