"""Parameter initializers, Burn-style: each takes the shape and, where it matters, the fans explicitly.

Layers know their own fans (a Linear's (out, in) weight has fan_in = in, its second dim; a conv's has
in/groups * kernel size), so initializers do not guess them from a layout.

Example:
    >>> w = init.kaiming_uniform((128, 784), fan_in=784)      # a Linear(784, 128)'s weight
    >>> b = init.zeros((128,))
"""

from __future__ import annotations

import math

import numpy as np

from ..api import creation
from ..tensor import Tensor

GAINS = {"linear": 1.0, "sigmoid": 1.0, "tanh": 5.0 / 3.0, "relu": math.sqrt(2.0), "selu": 0.75}


def gain(nonlinearity: str, negative_slope: float = 0.01) -> float:
    """The recommended gain for a nonlinearity (PyTorch's `calculate_gain`)."""
    if nonlinearity == "leaky_relu":
        return math.sqrt(2.0 / (1 + negative_slope ** 2))
    if nonlinearity not in GAINS:
        raise ValueError(f"unknown nonlinearity {nonlinearity!r}; known: {sorted(GAINS) + ['leaky_relu']}")
    return GAINS[nonlinearity]


def zeros(shape, device=None, dtype=None) -> Tensor:
    """All zeros."""
    return creation.zeros(*shape, dtype=dtype, device=device)


def ones(shape, device=None, dtype=None) -> Tensor:
    """All ones."""
    return creation.ones(*shape, dtype=dtype, device=device)


def constant(shape, value: float, device=None, dtype=None) -> Tensor:
    """All `value`."""
    return creation.full(tuple(shape), float(value), dtype=dtype, device=device)


def uniform(shape, low: float = 0.0, high: float = 1.0, device=None, dtype=None) -> Tensor:
    """Uniform in [low, high)."""
    return creation.uniform(*shape, low=low, high=high, dtype=dtype, device=device)


def normal(shape, mean: float = 0.0, std: float = 1.0, device=None, dtype=None) -> Tensor:
    """Normal with `mean` and `std`."""
    return creation.normal(*shape, mean=mean, std=std, dtype=dtype, device=device)


def xavier_uniform(shape, fan_in: int, fan_out: int, gain: float = 1.0, device=None, dtype=None) -> Tensor:
    """Glorot uniform: U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out))."""
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform(shape, -a, a, device, dtype)


def xavier_normal(shape, fan_in: int, fan_out: int, gain: float = 1.0, device=None, dtype=None) -> Tensor:
    """Glorot normal: N(0, std) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    return normal(shape, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), device, dtype)


def kaiming_uniform(shape, fan_in: int, gain: float = math.sqrt(2.0), device=None, dtype=None) -> Tensor:
    """He uniform: U(-b, b) with b = gain * sqrt(3 / fan_in).

    `gain=1/sqrt(3)` gives PyTorch's default Linear and Conv weights, U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    """
    b = gain * math.sqrt(3.0 / fan_in) if fan_in else 0.0
    return uniform(shape, -b, b, device, dtype)


def kaiming_normal(shape, fan_in: int, gain: float = math.sqrt(2.0), device=None, dtype=None) -> Tensor:
    """He normal: N(0, gain / sqrt(fan_in))."""
    return normal(shape, 0.0, gain / math.sqrt(fan_in) if fan_in else 0.0, device, dtype)


def trunc_normal(shape, mean: float = 0.0, std: float = 1.0, low: float = -2.0, high: float = 2.0,
                 device=None, dtype=None) -> Tensor:
    """Normal with `mean` and `std`, redrawn outside [low, high] (absolute bounds, like PyTorch)."""
    x = normal(shape, mean, std, device, dtype)
    for _ in range(64):
        bad = (x < low) | (x > high)
        if not bool(bad.any()):
            return x
        x = x.where(~bad, normal(shape, mean, std, device, dtype))
    return x.clamp(low, high)


def orthogonal(shape, gain: float = 1.0, device=None, dtype=None) -> Tensor:
    """A (semi-)orthogonal matrix over the first dim and the rest flattened, scaled by `gain`."""
    rows = shape[0]
    cols = math.prod(shape[1:]) if len(shape) > 1 else 1
    flat = normal((max(rows, cols), min(rows, cols)), device=device, dtype="f64").numpy()
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    values = (gain * q[:rows, :cols]).reshape(shape)
    out = creation.from_numpy(np.ascontiguousarray(values), device=device)
    return out.cast(dtype or "f32")
