"""Probability distributions with PyTorch's `torch.distributions` API: `Normal`, `Uniform`, `Bernoulli`,
`Categorical` (sample, rsample where reparametrizable, log_prob, entropy, mean, variance, stddev,
batch_shape, event_shape, validate_args). Draws come from ember's random stream of the parameters'
device, so `ember.seed(s)` gives the same numbers on every device. See docs/distributions.md.

Example:
    >>> from ember.distributions import Normal
    >>> d = Normal(ember.zeros(3), ember.ones(3))
    >>> d.log_prob(d.sample()).shape
    (3,)
"""

from .distribution import Distribution
from .continuous import Normal, Uniform
from .discrete import Bernoulli, Categorical

__all__ = ["Distribution", "Normal", "Uniform", "Bernoulli", "Categorical"]
