"""`embedding`: rows of a table picked by integer indices, over the `embedding` primitive."""

from __future__ import annotations

from ...api._common import apply
from ...errors import ShapeError
from ...tensor import Tensor


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None,
              scale_grad_by_freq: bool = False) -> Tensor:
    """Look up rows of `weight`: y[i..., :] = weight[input[i...], :].

    Args:
        input: integer indices of any shape, each in [0, num_embeddings).
        weight: (num_embeddings, embedding_dim).
        padding_idx: a row that gets no gradient (negative counts from the end).
        scale_grad_by_freq: divide each row's gradient by how often its index occurs in `input`.
    The result has shape input.shape + (embedding_dim,).

    Example:
        >>> embedding(ember.tensor([[0, 2]]), ember.randn(5, 3)).shape
        (1, 2, 3)
    """
    if weight.ndim != 2:
        raise ShapeError("embedding", f"weight of shape {weight.shape} is not (num_embeddings, embedding_dim)")
    if padding_idx is not None:
        rows = weight.shape[0]
        if not -rows <= padding_idx < rows:
            raise ShapeError("embedding", f"padding_idx {padding_idx} is out of range for {rows} embeddings")
        padding_idx %= rows
    return apply("embedding", weight, input, padding_idx=padding_idx, scale_grad_by_freq=bool(scale_grad_by_freq))
