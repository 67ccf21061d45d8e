"""`Embedding`: a learned lookup table from integer ids to vectors.

Example:
    >>> emb = Embedding(10, 4)
    >>> emb(ember.tensor([[1, 2], [3, 9]])).shape
    (2, 2, 4)
"""

from __future__ import annotations

from ..errors import DTypeError
from ..tensor import Tensor
from . import init
from .functional.embedding import embedding
from .module import Module
from .param import Param


class Embedding(Module):
    """`y[..., :] = weight[ids[...], :]`.

    Args:
        num_embeddings: the number of ids (rows of `weight`).
        embedding_dim: the size of each vector.
        padding_idx: an id whose row starts at zero and receives no gradient (negative counts from the
            end, like PyTorch); its output is the row's current value.
    The weight (num_embeddings, embedding_dim) is initialized N(0, 1), as in PyTorch.

    Example:
        >>> Embedding(5, 3, padding_idx=0)(ember.tensor([0, 4])).tolist()[0]
        [0.0, 0.0, 0.0]
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 device=None, dtype=None) -> None:
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"Embedding: padding_idx {padding_idx} is out of range for "
                                 f"{num_embeddings} embeddings")
            padding_idx %= num_embeddings
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.padding_idx = padding_idx
        weight = init.normal((num_embeddings, embedding_dim), device=device, dtype=dtype)
        if padding_idx is not None:
            weight = weight.slice_assign(padding_idx, 0.0)
        self.weight = Param(weight)

    def forward(self, ids: Tensor) -> Tensor:
        if not ids.dtype.is_int:
            raise DTypeError(f"Embedding: ids must be an integer tensor, got {ids.dtype}")
        return embedding(ids.to(self.weight.device.inner), self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        pad = f", padding_idx={self.padding_idx}" if self.padding_idx is not None else ""
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"
