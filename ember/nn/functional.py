"""Functional forms of layers: activations (from `ember.activation`) and module ops (convolution,
pooling, interpolation, ...) for use without a `Module`.

Example:
    >>> from ember.nn import functional as F
    >>> F.relu(ember.tensor([-1.0, 1.0])).tolist()
    [0.0, 1.0]
"""

from ..api.activation import *  # noqa: F401,F403
