"""The `embedding` primitive: rows of a weight table picked by integer indices.

y[i..., :] = weight[indices[i...], :] for weight (V, D) and indices of any shape, so y has shape
indices.shape + (D,). The gradient of the table sums each output row's cotangent into the row it came
from (an `index_add`); rows named `padding_idx` get none, and with `scale_grad_by_freq` each
contribution is divided by how often its index occurs in `indices`.

Example:
    >>> registry["embedding"].infer(Aval((10, 4), f32), Aval((2, 3), i64), padding_idx=None,
    ...                             scale_grad_by_freq=False)
    Aval(shape=(2, 3, 4), dtype=f32)
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import DTypeError, ShapeError
from .primitive import Aval, primitive, saves_inputs_at


def _embedding_infer(weight: Aval, indices: Aval, *, padding_idx, scale_grad_by_freq) -> Aval:
    if len(weight.shape) != 2:
        raise ShapeError("embedding", f"weight of shape {weight.shape} is not a (num_embeddings, dim) table")
    if not indices.dtype.is_int:
        raise DTypeError(f"embedding: indices must be an integer tensor, got {indices.dtype}")
    return Aval(indices.shape + weight.shape[1:], weight.dtype)


def _embedding_reference(weight, indices, *, padding_idx, scale_grad_by_freq):
    rows = weight.shape[0]
    if indices.size and (indices.min() < 0 or indices.max() >= rows):
        bad = indices[(indices < 0) | (indices >= rows)].flat[0]
        raise IndexError(f"embedding: index {bad} is out of range for a table of {rows} rows")
    return np.take(weight, indices, axis=0)


def _embedding_vjp(ctx, g):
    indices = ctx.input(1)
    (table, _), _ = ctx.input_avals
    p = ctx.params
    flat = indices.reshape(math.prod(indices.shape))
    rows = g.reshape(flat.shape[0], table[1])
    if p["padding_idx"] is not None:
        rows = rows * (flat != p["padding_idx"]).unsqueeze(1).cast(g.dtype)
    if p["scale_grad_by_freq"]:
        counts = g.new_zeros(table[0]).index_add(0, flat, g.new_zeros(flat.shape[0]) + 1)
        rows = rows / counts.index_select(0, flat).unsqueeze(1)
    return g.new_zeros(table).index_add(0, flat, rows), None


primitive("embedding", infer=_embedding_infer, vjp=_embedding_vjp, saves=saves_inputs_at(1))(_embedding_reference)
