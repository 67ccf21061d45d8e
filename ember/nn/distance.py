"""Distances between batches of vectors: `cosine_similarity` and `pairwise_distance`, as functions and
as modules, with PyTorch's formulas (including where `eps` enters).

Example:
    >>> a, b = ember.tensor([[1.0, 0.0]]), ember.tensor([[1.0, 1.0]])
    >>> round(cosine_similarity(a, b).item(), 4)
    0.7071
"""

from __future__ import annotations

from .. import amp
from ..errors import ShapeError
from ..ops.primitive import broadcast_shapes
from ..tensor import Tensor
from .module import Module


@amp.float32
def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """The cosine of the angle between `x1` and `x2` along `dim` (the two broadcast together).

    Args:
        x1, x2: float tensors that broadcast to one shape.
        dim: the dim holding the vectors.
        eps: the smallest norm used: `sum(x1 / max(|x1|, eps) * x2 / max(|x2|, eps))` along `dim`;
            the gradient treats the clamp as the identity, as PyTorch does.

    Example:
        >>> cosine_similarity(ember.tensor([[1.0, 0.0]]), ember.tensor([[0.0, 2.0]])).tolist()
        [0.0]
    """
    shape = broadcast_shapes("cosine_similarity", x1.shape, x2.shape)
    x1, x2 = x1.expand(shape), x2.expand(shape)
    n1, n2 = _clamped_norm(x1, dim, eps), _clamped_norm(x2, dim, eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim=dim)


def _clamped_norm(x: Tensor, dim: int, eps: float) -> Tensor:
    """`max(|x|, eps)` whose gradient is the norm's own: PyTorch clamps the norm outside autograd."""
    n = x.norm(dim=dim, keepdim=True)
    return n + (n.clamp(min=eps) - n).detach()


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6,
                      keepdim: bool = False) -> Tensor:
    """The p-norm distance between `x1` and `x2` along their last dim (the two broadcast together).

    Args:
        x1, x2: float tensors that broadcast to one shape, vectors along the last dim.
        p: the norm's order (may be `inf`).
        eps: added to the difference to avoid a zero norm: `||x1 - x2 + eps||_p`.
        keepdim: keep the last dim with size 1.

    Example:
        >>> pairwise_distance(ember.tensor([[0.0, 0.0]]), ember.tensor([[3.0, 4.0]]), eps=0.0).tolist()
        [5.0]
    """
    if x1.ndim == 0 and x2.ndim == 0:
        raise ShapeError("pairwise_distance", "inputs must have at least one dim")
    return (x1 - x2 + eps).norm(p=p, dim=-1, keepdim=keepdim)


class CosineSimilarity(Module):
    """`cosine_similarity(x1, x2, dim, eps)` as a module.

    Args:
        dim: the dim holding the vectors (default 1).
        eps: the smallest norm used (default 1e-8).

    Example:
        >>> CosineSimilarity(dim=-1)(ember.ones(2, 3), ember.ones(2, 3)).tolist()
        [1.0, 1.0]
    """

    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        self.dim = dim
        self.eps = eps

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return cosine_similarity(x1, x2, self.dim, self.eps)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, eps={self.eps}"


class PairwiseDistance(Module):
    """`pairwise_distance(x1, x2, p, eps, keepdim)` as a module.

    Args:
        p: the norm's order (default 2).
        eps: added to the difference (default 1e-6).
        keepdim: keep the last dim with size 1.

    Example:
        >>> PairwiseDistance()(ember.zeros(2, 3), ember.ones(2, 3)).shape
        (2,)
    """

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> None:
        self.p = p
        self.eps = eps
        self.keepdim = keepdim

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return pairwise_distance(x1, x2, self.p, self.eps, self.keepdim)

    def extra_repr(self) -> str:
        return f"p={self.p}, eps={self.eps}, keepdim={self.keepdim}"
