"""`Normal` and `Uniform`: continuous distributions with reparametrized samples (PyTorch's formulas).

Example:
    >>> d = Uniform(ember.tensor([0.0, 1.0]), ember.tensor([1.0, 3.0]))
    >>> d.mean.tolist(), d.entropy().shape
    ([0.5, 2.0], (2,))
"""

from __future__ import annotations

import math

from ..api.creation import rand, randn
from ..tensor import Tensor
from .distribution import Distribution, as_parameters, check, check_event

_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


class Normal(Distribution):
    """The normal distribution of mean `loc` and standard deviation `scale` (> 0), broadcast together.

    Example:
        >>> d = Normal(ember.tensor([0.0, 1.0]), 2.0)
        >>> d.rsample((5,)).shape, d.log_prob(ember.tensor(0.0)).shape
        ((5, 2), (2,))
    """

    has_rsample = True
    _parameter_names = ("loc", "scale")

    def __init__(self, loc, scale, validate_args: bool | None = None) -> None:
        self.loc, self.scale = as_parameters("Normal", loc, scale)
        super().__init__(self.loc.shape, (), validate_args)

    def _check_parameters(self) -> None:
        check("Normal", "loc", self.loc == self.loc, self.loc, "a real number (not NaN)")
        check("Normal", "scale", self.scale > 0, self.scale, "> 0")

    def rsample(self, sample_shape=()) -> Tensor:
        """`loc + eps * scale` with eps standard normal draws from the parameters' random stream."""
        eps = randn(*self._extended_shape(sample_shape), dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + eps * self.scale

    def log_prob(self, value) -> Tensor:
        value = self._value(value)
        if self._validate:
            check_event("Normal.log_prob", value, self.batch_shape, self.event_shape)
            check("Normal.log_prob", "value", value == value, value, "a real number (not NaN)")
        return -((value - self.loc) ** 2) / (2 * self.scale ** 2) - self.scale.log() - _LOG_SQRT_2PI

    def cdf(self, value) -> Tensor:
        return 0.5 * (1 + ((self._value(value) - self.loc) * self.scale.reciprocal() / math.sqrt(2)).erf())

    def icdf(self, value) -> Tensor:
        return self.loc + self.scale * (2 * self._value(value) - 1).erfinv() * math.sqrt(2)

    def entropy(self) -> Tensor:
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.scale.log()

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def stddev(self) -> Tensor:
        return self.scale

    @property
    def variance(self) -> Tensor:
        return self.scale ** 2


class Uniform(Distribution):
    """The uniform distribution on [low, high) (low < high), broadcast together.

    Example:
        >>> Uniform(0.0, 4.0).variance.item()
        1.3333333730697632
    """

    has_rsample = True
    _parameter_names = ("low", "high")

    def __init__(self, low, high, validate_args: bool | None = None) -> None:
        self.low, self.high = as_parameters("Uniform", low, high)
        super().__init__(self.low.shape, (), validate_args)

    def _check_parameters(self) -> None:
        check("Uniform", "low", self.low < self.high, self.low, "< high")

    def rsample(self, sample_shape=()) -> Tensor:
        """`low + u * (high - low)` with u uniform [0, 1) draws from the parameters' random stream."""
        u = rand(*self._extended_shape(sample_shape), dtype=self.low.dtype, device=self.low.device)
        return self.low + u * (self.high - self.low)

    def _inside(self, value: Tensor) -> Tensor:
        return (self.low <= value) & (value < self.high)

    def log_prob(self, value) -> Tensor:
        """log(1 / (high - low)) inside [low, high), -inf outside (an error there with validate_args)."""
        value = self._value(value)
        inside = self._inside(value)
        if self._validate:
            check_event("Uniform.log_prob", value, self.batch_shape, self.event_shape)
            check("Uniform.log_prob", "value", inside, value, "in [low, high)")
        return inside.cast(self.low.dtype).log() - (self.high - self.low).log()

    def cdf(self, value) -> Tensor:
        return ((self._value(value) - self.low) / (self.high - self.low)).clamp(0, 1)

    def icdf(self, value) -> Tensor:
        return self._value(value) * (self.high - self.low) + self.low

    def entropy(self) -> Tensor:
        return (self.high - self.low).log()

    @property
    def mean(self) -> Tensor:
        return (self.high + self.low) / 2

    @property
    def mode(self) -> Tensor:
        """NaN: every point of [low, high) is a mode (PyTorch's answer)."""
        return self.high * float("nan")

    @property
    def stddev(self) -> Tensor:
        return (self.high - self.low) / 12 ** 0.5

    @property
    def variance(self) -> Tensor:
        return (self.high - self.low) ** 2 / 12
