"""`Dropout`: inverted dropout drawn from the device's random stream.

In training each element is zeroed with probability `p` and the survivors are scaled by `1 / (1 - p)`,
so the expected output equals the input and evaluation needs no rescaling. In eval mode the layer is the
identity. The mask comes from the input device's random stream, so `ember.seed` makes it reproducible.

Example:
    >>> drop = Dropout(0.5)
    >>> drop.eval()(ember.ones(4)).tolist()
    [1.0, 1.0, 1.0, 1.0]
"""

from __future__ import annotations

from ..api.creation import rand
from ..tensor import Tensor
from .module import Module


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each element of `x` with probability `p` and scale the rest by `1 / (1 - p)`.

    Args:
        x: a float tensor.
        p: the drop probability, in [0, 1].
        training: when false, return `x` unchanged.

    Example:
        >>> dropout(ember.ones(3), p=0.0).tolist()
        [1.0, 1.0, 1.0]
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0
    # The mask is data, not a function of x: drawn on the inner device, it carries no gradient history.
    keep = rand(*x.shape, dtype=x.dtype, device=x.device.inner) >= p
    return x * (keep.cast(x.dtype) * (1.0 / (1.0 - p)))


class Dropout(Module):
    """Inverted dropout (see `dropout`); the identity in eval mode.

    Args:
        p: the probability of zeroing an element (default 0.5).

    Example:
        >>> Dropout(0.1)(ember.randn(2, 8)).shape
        (2, 8)
    """

    def __init__(self, p: float = 0.5) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
