"""Pairwise distances: `cdist`, PyTorch's `torch.cdist`, composed of a broadcast difference and
`norm`, so its gradients are `norm`'s (zero at coinciding points, as PyTorch gives).

Example:
    >>> ember.cdist(ember.tensor([[0.0, 0.0]]), ember.tensor([[3.0, 4.0], [1.0, 0.0]])).tolist()
    [[5.0, 1.0]]
"""

from __future__ import annotations

from ..errors import DTypeError, ShapeError
from ._common import Tensor

_MODES = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist")


def cdist(x1: Tensor, x2: Tensor, p: float = 2.0, compute_mode: str = _MODES[0]) -> Tensor:
    """The p-norm distance between each row vector of `x1` (..., P, M) and each of `x2` (..., R, M):
    a (..., P, R) tensor, the leading dims broadcast. `p` >= 0, `inf` included.

    For p=2, `compute_mode` chooses PyTorch's way: from `|a|^2 + |b|^2 - 2 a.b` with a matrix product
    (memory P*R rather than P*R*M, less accurate for close points; clamped at 1e-30 before the root,
    so coinciding points give ~1e-15 and a zero gradient) when P or R exceed 25 by default, always
    with "use_mm_for_euclid_dist", never with "donot_use_mm_for_euclid_dist"; otherwise, and for
    other p, from the differences.

    Example:
        >>> ember.cdist(ember.ones(2, 3), ember.zeros(4, 3), p=1).shape
        (2, 4)
    """
    if compute_mode not in _MODES:
        raise ValueError(f"cdist: compute_mode must be one of {', '.join(_MODES)}, got {compute_mode!r}")
    if not (x1.dtype.is_float and x2.dtype.is_float):
        raise DTypeError(f"cdist expects float tensors, got {x1.dtype} and {x2.dtype}")
    if x1.ndim < 2 or x2.ndim < 2 or x1.shape[-1] != x2.shape[-1]:
        raise ShapeError("cdist", f"expects (..., P, M) and (..., R, M) tensors, got shapes {x1.shape} "
                                  f"and {x2.shape}")
    if p < 0:
        raise ValueError(f"cdist: p must be non-negative, got {p}")
    if p == 2 and (compute_mode == _MODES[1] or (compute_mode == _MODES[0] and max(x1.shape[-2], x2.shape[-2]) > 25)):
        return _euclidean_by_matmul(x1, x2)
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    if x1.shape[-1] == 0:  # no coordinates: every distance is 0 (amax would refuse the empty dim)
        return diff.sum(dim=-1)
    return diff.norm(p, dim=-1)



def _euclidean_by_matmul(x1: Tensor, x2: Tensor) -> Tensor:
    """PyTorch's `_euclidean_dist`: squared norms and a matrix product, clamped, then the root."""
    sq1 = (x1 * x1).sum(dim=-1, keepdim=True)
    sq2 = (x2 * x2).sum(dim=-1, keepdim=True).transpose(-1, -2)
    return ((x1 * -2.0).matmul(x2.transpose(-1, -2)) + sq1 + sq2).clamp(min=1e-30).sqrt()


METHODS: dict = {}
