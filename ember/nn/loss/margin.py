"""Margin and embedding losses: cosine embedding, margin ranking, hinge embedding and triplet margin.
Formulas and reductions are PyTorch's.

Example:
    >>> margin_ranking_loss(ember.tensor([1.0]), ember.tensor([2.0]), ember.tensor([1.0])).item()
    1.0
"""

from __future__ import annotations

from ... import amp
from ...errors import ShapeError
from ...tensor import Tensor
from ..distance import pairwise_distance
from .reduction import check_reduction, floating, reduce

# PyTorch adds this to squared norms in cosine_embedding_loss so a zero vector gives a finite cosine.
_COSINE_EPS = 1e-12


@amp.float32
def cosine_embedding_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
                          reduction: str = "mean") -> Tensor:
    """Pulls pairs labelled 1 together and pushes pairs labelled -1 below a cosine of `margin`.

    Args:
        input1, input2: (N, D) or (D,) embeddings.
        target: (N,) or () labels, 1 or -1.
        margin: in [-1, 1]; `l = 1 - cos` for label 1, `max(0, cos - margin)` for label -1, with
            `cos = <a, b> / sqrt((|a|^2 + 1e-12) (|b|^2 + 1e-12))`.
        reduction: `"mean"`, `"sum"` or `"none"`.

    Example:
        >>> a = ember.tensor([[1.0, 0.0]])
        >>> cosine_embedding_loss(a, a, ember.tensor([1])).item()
        0.0
    """
    op = "cosine_embedding_loss"
    floating(op, input1, "input1")
    floating(op, input2, "input2")
    if input1.shape != input2.shape or input1.ndim not in (1, 2) or target.shape != input1.shape[:-1]:
        raise ShapeError(op, f"expected input1 and input2 of one shape (N, D) or (D,) and target (N,) or (), "
                             f"got {input1.shape}, {input2.shape} and {target.shape}")
    check_reduction(op, reduction)
    dot = (input1 * input2).sum(dim=-1)
    sq1 = (input1 * input1).sum(dim=-1) + _COSINE_EPS
    sq2 = (input2 * input2).sum(dim=-1) + _COSINE_EPS
    cos = dot / (sq1 * sq2).sqrt()
    zeros = cos.detach() * 0
    loss = (1 - cos).where(target == 1, zeros) + (cos - margin).clamp(min=0).where(target == -1, zeros)
    return reduce(loss, reduction, op)


@amp.float32
def margin_ranking_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
                        reduction: str = "mean") -> Tensor:
    """Asks `input1` to rank above `input2` by `margin` where the target is 1, below where it is -1.

    Args:
        input1, input2: scores of one shape.
        target: labels 1 or -1 of that shape.
        margin: the required gap; `l = max(0, -y (input1 - input2) + margin)`.
        reduction: `"mean"`, `"sum"` or `"none"`.

    Example:
        >>> margin_ranking_loss(ember.tensor([3.0]), ember.tensor([1.0]), ember.tensor([1.0])).item()
        0.0
    """
    op = "margin_ranking_loss"
    if not input1.shape == input2.shape == target.shape:
        raise ShapeError(op, f"input1, input2 and target must share a shape, got "
                             f"{input1.shape}, {input2.shape} and {target.shape}")
    loss = (-target * (input1 - input2) + margin).clamp(min=0)
    return reduce(loss, reduction, op)


@amp.float32
def hinge_embedding_loss(input: Tensor, target: Tensor, margin: float = 1.0, reduction: str = "mean") -> Tensor:
    """Hinge loss on distances: small for pairs labelled 1, at least `margin` for pairs labelled -1.

    Args:
        input: distances (any shape).
        target: labels 1 or -1 of the same shape.
        margin: `l = x` where the label is 1 and `max(0, margin - x)` where it is -1.
        reduction: `"mean"`, `"sum"` or `"none"`.

    Example:
        >>> hinge_embedding_loss(ember.tensor([0.3]), ember.tensor([-1.0])).item()
        0.7
    """
    op = "hinge_embedding_loss"
    if input.shape != target.shape:
        raise ShapeError(op, f"input {input.shape} and target {target.shape} must share a shape")
    zeros = input.detach() * 0
    loss = (margin - input).clamp(min=0).where(target != 1, zeros) + input.where(target != -1, zeros)
    return reduce(loss, reduction, op)


@amp.float32
def triplet_margin_loss(anchor: Tensor, positive: Tensor, negative: Tensor, margin: float = 1.0,
                        p: float = 2.0, eps: float = 1e-6, swap: bool = False, reduction: str = "mean") -> Tensor:
    """Asks the anchor to be closer to the positive than to the negative by `margin`.

    Args:
        anchor, positive, negative: (N, D) or (D,) embeddings of one shape.
        margin: the required gap; `l = max(0, margin + d(a, p) - d(a, n))` with
            `d = pairwise_distance(., ., p, eps)`.
        p: the norm's order.
        eps: added to differences (see `pairwise_distance`).
        swap: use `min(d(a, n), d(p, n))` as the negative distance (the distance swap).
        reduction: `"mean"`, `"sum"` or `"none"`.

    Example:
        >>> a = ember.tensor([[0.0, 0.0]])
        >>> triplet_margin_loss(a, a, a + 5).item()
        0.0
    """
    op = "triplet_margin_loss"
    if not anchor.shape == positive.shape == negative.shape or anchor.ndim not in (1, 2):
        raise ShapeError(op, f"anchor, positive and negative must share a shape (N, D) or (D,), got "
                             f"{anchor.shape}, {positive.shape} and {negative.shape}")
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = d_neg.minimum(pairwise_distance(positive, negative, p, eps))
    loss = (d_pos - d_neg + margin).clamp(min=0)
    return reduce(loss, reduction, op)
