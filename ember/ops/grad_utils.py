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
    if not dims:
        return g.reshape(shape)
    # One sum that gives `shape` itself where it can: without keepdim when only leading dims go (a
    # bias of a linear layer), with it when only size-1 dims do. A reshape is a fusion sync point.
    out = g.sum(dim=dims, keepdim=lead == 0)
    return out if out.shape == shape else out.reshape(shape)
