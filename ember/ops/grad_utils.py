"""Small helpers shared by gradient rules."""

from __future__ import annotations


def sum_to(g, shape: tuple[int, ...]):
    """Sum a broadcast cotangent `g` back down to `shape` (the inverse of broadcasting).

    Example:
        >>> sum_to(ember.ones(2, 3), (3,)).tolist()
        [2.0, 2.0, 2.0]
    """
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    dims = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] != 1
    )
    out = g.sum(dim=dims, keepdim=True) if dims else g
    return out.reshape(shape)
