"""`Distribution`: what every distribution shares (torch.distributions' API), and its argument checks.

A distribution has a `batch_shape` (independent distributions with their own parameters) and an
`event_shape` (the shape of one draw). `sample(sample_shape)` returns `sample_shape + batch_shape +
event_shape` values drawn from ember's random stream of the parameters' device (so a seed gives the same
numbers on every device) and records no gradient; `rsample` (where `has_rsample`) is the same draw as a
differentiable function of the parameters (the reparametrization trick).

With `validate_args` (default on, as in PyTorch; `Distribution.set_default_validate_args(False)` turns
it off) the parameters are checked when the distribution is built and `log_prob`'s values against the
support, raising `DomainError` with the bad values; each check reads the values on the host.

Example:
    >>> d = ember.distributions.Normal(ember.zeros(3), 1.0)
    >>> d.batch_shape, d.sample((2,)).shape
    ((3,), (2, 3))
"""

from __future__ import annotations

import numbers

import numpy as np

from ..api.creation import tensor as make_tensor
from ..dtype import default_float
from ..errors import DomainError, ShapeError
from ..ops.primitive import broadcast_shapes
from ..tensor import Tensor


class Distribution:
    """Base class of distributions (see the module docs); subclasses set the shapes and the methods."""

    has_rsample = False
    _validate_default = True
    _parameter_names: tuple[str, ...] = ()  # the parameters as given, for repr and conversions

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        """Turn argument validation on or off for distributions built without `validate_args`."""
        Distribution._validate_default = bool(value)

    def __init__(self, batch_shape: tuple = (), event_shape: tuple = (), validate_args: bool | None = None) -> None:
        self._batch_shape, self._event_shape = tuple(batch_shape), tuple(event_shape)
        self._validate = Distribution._validate_default if validate_args is None else bool(validate_args)
        if self._validate:
            self._check_parameters()

    @property
    def batch_shape(self) -> tuple:
        return self._batch_shape

    @property
    def event_shape(self) -> tuple:
        return self._event_shape

    def _check_parameters(self) -> None:
        """Raise `DomainError` for parameters outside their constraints (subclasses)."""

    def _extended_shape(self, sample_shape=()) -> tuple:
        sample_shape = (sample_shape,) if isinstance(sample_shape, numbers.Integral) else tuple(sample_shape)
        return sample_shape + self._batch_shape + self._event_shape

    def sample(self, sample_shape=()) -> Tensor:
        """Draws of shape `sample_shape + batch_shape + event_shape`, without gradient history."""
        return self.rsample(sample_shape).detach()

    def rsample(self, sample_shape=()) -> Tensor:
        """Reparametrized draws: differentiable with respect to the parameters."""
        raise NotImplementedError(f"{type(self).__name__} has no reparametrized sample (rsample); use sample()")

    def log_prob(self, value: Tensor) -> Tensor:
        """The log density (or log mass) of `value`, broadcast against the batch shape."""
        raise NotImplementedError(f"{type(self).__name__} does not define log_prob")

    def entropy(self) -> Tensor:
        """The entropy of each distribution of the batch (in nats)."""
        raise NotImplementedError(f"{type(self).__name__} does not define entropy")

    @property
    def mean(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not define mean")

    @property
    def variance(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not define variance")

    @property
    def stddev(self) -> Tensor:
        return self.variance.sqrt()

    def _value(self, value) -> Tensor:
        """`value` as a tensor on the parameters' device (a number or array becomes one)."""
        like = getattr(self, self._parameter_names[0])
        if not isinstance(value, Tensor):
            value = make_tensor(value, dtype=like.dtype if not isinstance(value, (bool, np.bool_)) else None,
                                device=like.device)
        return value

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}: {tuple(getattr(self, name).shape)}" for name in self._parameter_names)
        return f"{type(self).__name__}({shown})"


def as_parameters(op: str, *values) -> list[Tensor]:
    """The parameters as tensors of one float dtype and device, broadcast together (PyTorch's
    `broadcast_all`): numbers take the dtype and device of the tensors given (default float if none)."""
    tensors = [v for v in values if isinstance(v, Tensor)]
    for v in values:
        if not isinstance(v, (Tensor, numbers.Real)):
            raise TypeError(f"{op}: parameters must be tensors or numbers, got {type(v).__name__}")
    dtype = tensors[0].dtype if tensors and tensors[0].dtype.is_float else default_float()
    device = tensors[0].device if tensors else None
    out = [v.cast(dtype) if isinstance(v, Tensor) else make_tensor(float(v), dtype=dtype, device=device)
           for v in values]
    shape = broadcast_shapes(op, *(t.shape for t in out))
    return [t if t.shape == shape else t.broadcast_to(shape) for t in out]


def check(op: str, name: str, ok: Tensor, values: Tensor, constraint: str) -> None:
    """Raise `DomainError` unless `ok` (broadcast against `values`) holds everywhere, naming `name`, its
    shape, the constraint and up to five of the values that break it."""
    good = np.asarray(ok.numpy())
    if good.all():
        return
    array = np.asarray(values.numpy())
    shape = np.broadcast_shapes(good.shape, array.shape)
    bad = np.broadcast_to(array, shape)[~np.broadcast_to(good, shape)].tolist()
    shown = ", ".join(repr(v) for v in bad[:5]) + (f", ... ({len(bad)} in all)" if len(bad) > 5 else "")
    raise DomainError(op, f"{name} of shape {tuple(values.shape)} must be {constraint}, found {shown}")


def check_event(op: str, value: Tensor, batch_shape: tuple, event_shape: tuple) -> None:
    """A value for `log_prob` must broadcast against batch_shape + event_shape."""
    want = batch_shape + event_shape
    try:
        broadcast_shapes(op, value.shape, want)
    except ShapeError:
        raise ShapeError(op, f"value of shape {value.shape} does not broadcast with the distribution's "
                             f"batch_shape + event_shape {want}") from None
