"""`Bernoulli` and `Categorical`, parametrized by `probs` or `logits` (give one; the other is derived on
first use, as in PyTorch: `logits = log(p) - log1p(-p)` and `probs = sigmoid(logits)` for Bernoulli,
`logits = log(p)` and `probs = softmax(logits)` for Categorical, with p clamped to [eps, 1 - eps]).

`Categorical.sample` draws by inverse CDF: one uniform u in [0, 1) per draw from ember's random stream,
and the category is the number of cumulative probabilities <= u (clamped to the last category).

Example:
    >>> d = Categorical(logits=ember.zeros(2, 4))
    >>> d.batch_shape, d.sample((3,)).shape, d.entropy().shape
    ((2,), (3, 2), (2,))
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from ..api.activation import softmax
from ..api.creation import bernoulli, full, rand, tensor as make_tensor
from ..api.math import where
from ..errors import ShapeError
from ..nn.loss import binary_cross_entropy_with_logits
from ..tensor import Tensor
from .distribution import Distribution, as_parameters, check, check_event


def _finfo(dtype):
    import ml_dtypes  # np.finfo does not know bf16; loaded with bf16 anyway
    return ml_dtypes.finfo(dtype.np)


def clamp_probs(probs: Tensor) -> Tensor:
    """`probs` clamped to [eps, 1 - eps] of their dtype (so their logarithms stay finite)."""
    eps = float(_finfo(probs.dtype).eps)
    return probs.clamp(eps, 1 - eps)


def _one_of(op: str, probs, logits) -> str:
    if (probs is None) == (logits is None):
        raise ValueError(f"{op}: give exactly one of probs and logits")
    return "probs" if probs is not None else "logits"


class Bernoulli(Distribution):
    """Draws of 1 with probability `probs` (in [0, 1]) or sigmoid(`logits`), else 0.

    Example:
        >>> Bernoulli(probs=ember.tensor([0.25, 1.0])).variance.tolist()
        [0.1875, 0.0]
    """

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None) -> None:
        name = _one_of("Bernoulli", probs, logits)
        self._parameter_names = (name,)
        (value,) = as_parameters("Bernoulli", probs if name == "probs" else logits)
        self.__dict__[name] = value
        super().__init__(value.shape, (), validate_args)

    def _check_parameters(self) -> None:
        if self._parameter_names == ("probs",):
            check("Bernoulli", "probs", (self.probs >= 0) & (self.probs <= 1), self.probs, "in [0, 1]")
        else:
            check("Bernoulli", "logits", self.logits == self.logits, self.logits, "a real number (not NaN)")

    @cached_property
    def probs(self) -> Tensor:
        return self.logits.sigmoid()

    @cached_property
    def logits(self) -> Tensor:
        p = clamp_probs(self.probs)
        return p.log() - (-p).log1p()

    def sample(self, sample_shape=()) -> Tensor:
        """0/1 draws (in the parameters' dtype): 1 where a uniform draw is below `probs`."""
        return bernoulli(self.probs.detach().broadcast_to(self._extended_shape(sample_shape)))

    def log_prob(self, value) -> Tensor:
        value = self._value(value)
        if self._validate:
            check_event("Bernoulli.log_prob", value, self.batch_shape, self.event_shape)
            check("Bernoulli.log_prob", "value", (value == 0) | (value == 1), value, "0 or 1")
        logits, value = as_parameters("Bernoulli.log_prob", self.logits, value)
        return -binary_cross_entropy_with_logits(logits, value, reduction="none")

    def entropy(self) -> Tensor:
        return binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")

    @property
    def mean(self) -> Tensor:
        return self.probs

    @property
    def mode(self) -> Tensor:
        """1 where probs > 1/2, 0 where below, NaN at exactly 1/2."""
        return where(self.probs == 0.5, float("nan"), (self.probs > 0.5).cast(self.probs.dtype))

    @property
    def variance(self) -> Tensor:
        return self.probs * (1 - self.probs)


class Categorical(Distribution):
    """Draws of a category in [0, K) with probabilities `probs` (..., K) (non-negative, normalized over
    the last dim) or softmax(`logits`) (..., K); the batch shape is the leading dims.

    Example:
        >>> Categorical(probs=ember.tensor([1.0, 3.0])).probs.tolist()
        [0.25, 0.75]
    """

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None) -> None:
        name = _one_of("Categorical", probs, logits)
        self._parameter_names = (name,)
        (value,) = as_parameters("Categorical", probs if name == "probs" else logits)
        if value.ndim < 1:
            raise ShapeError("Categorical", f"{name} must have at least one dim (the categories), got a 0-d tensor")
        if value.shape[-1] == 0:
            raise ShapeError("Categorical", f"{name} of shape {value.shape} has no categories")
        if name == "probs":
            value = value / value.sum(-1, keepdim=True)
        else:
            value = value - value.logsumexp(-1, keepdim=True)
        self.__dict__[name] = value
        super().__init__(value.shape[:-1], (), validate_args)

    def _check_parameters(self) -> None:
        if self._parameter_names == ("probs",):
            p = self.probs
            ok = ((p >= 0).all(-1) & ((p.sum(-1) - 1).abs() < 1e-6)).unsqueeze(-1)
            check("Categorical", "probs", ok, p, "non-negative with a positive finite sum over the last dim")
        else:
            check("Categorical", "logits", self.logits == self.logits, self.logits,
                  "real numbers (not NaN), not all -inf in a row")

    @cached_property
    def probs(self) -> Tensor:
        return softmax(self.logits, -1)

    @cached_property
    def logits(self) -> Tensor:
        return clamp_probs(self.probs).log()

    @property
    def num_events(self) -> int:
        return self.probs.shape[-1] if "probs" in self.__dict__ else self.logits.shape[-1]

    @property
    def param_shape(self) -> tuple:
        return self.batch_shape + (self.num_events,)

    def sample(self, sample_shape=()) -> Tensor:
        """i64 categories of shape `sample_shape + batch_shape`, by inverse CDF over uniform draws."""
        shape = self._extended_shape(sample_shape)
        cdf = self.probs.detach().cumsum(-1)
        u = rand(*shape, 1, dtype=cdf.dtype, device=cdf.device)
        return (cdf <= u).cast("i64").sum(-1).clamp(max=self.num_events - 1)

    def log_prob(self, value) -> Tensor:
        value = value if isinstance(value, Tensor) else make_tensor(value, device=self.logits.device)
        if self._validate:
            check_event("Categorical.log_prob", value, self.batch_shape, self.event_shape)
            ok = (value >= 0) & (value < self.num_events)
            check("Categorical.log_prob", "value", ok & (value == value.floor()) if value.dtype.is_float else ok,
                  value, f"an integer in [0, {self.num_events})")
        index = value.cast("i64").unsqueeze(-1)
        shape = tuple(np.broadcast_shapes(index.shape, self.logits.shape))
        index = index.broadcast_to(shape[:-1] + (1,))
        return self.logits.broadcast_to(shape).gather(-1, index).squeeze(-1)

    def entropy(self) -> Tensor:
        logits = self.logits.clamp(min=float(_finfo(self.logits.dtype).min))
        return -(logits * self.probs).sum(-1)

    @property
    def mean(self) -> Tensor:
        return full(self.batch_shape, float("nan"), dtype=self.probs.dtype, device=self.probs.device)

    @property
    def mode(self) -> Tensor:
        return self.probs.argmax(-1)

    @property
    def variance(self) -> Tensor:
        return self.mean
