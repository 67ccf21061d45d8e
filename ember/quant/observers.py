"""Observers: they watch the activations of calibration batches and give the per-tensor scale (and
zero point) a scheme quantizes them with.

- `MinMaxObserver`: the running minimum and maximum (PyTorch's default observer).
- `PercentileObserver(percentile)`: the mean over batches of each batch's percentile of |x| (and of x
  at both ends for affine schemes), which ignores rare outliers.
- `AbsMeanObserver`: BitNet b1.58's rule, the code unit is the mean |x| (made for 2-bit codes; a
  symmetric scheme only).

Example:
    >>> obs = MinMaxObserver()
    >>> obs.observe(ember.tensor([-1.0, 3.0]))
    >>> obs.qparams(int8())
    (0.023622047156095505, None)
"""

from __future__ import annotations

import numpy as np

from ..errors import QuantSchemeError
from ..qscheme import QuantScheme, reference
from ..tensor import Tensor


def _top(scheme: QuantScheme) -> float:
    """The code magnitude the largest value maps to."""
    if scheme.value in reference.FLOAT_CODES:
        return reference.FLOAT_CODES[scheme.value][1]
    return 1.0 if scheme.value == "nf4" else float(scheme.qrange[1])


def _from_range(lo: float, hi: float, scheme: QuantScheme) -> tuple[float, int | None]:
    if scheme.param == "ue8m0" or scheme.double_quant:
        raise QuantSchemeError(f"{scheme}: activations are calibrated per tensor with float scales")
    if scheme.mode == "affine":
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        scale = float(np.float32(hi - lo) / np.float32(scheme.qrange[1]))
        zero = int(np.clip(np.round(-lo / scale), *scheme.qrange)) if scale > 0 else 0
        return scale, zero
    return float(np.float32(max(abs(lo), abs(hi))) / np.float32(_top(scheme))), None


class MinMaxObserver:
    """The range of everything observed."""

    def __init__(self) -> None:
        self.lo, self.hi = np.inf, -np.inf

    def observe(self, x: Tensor) -> None:
        self.lo = min(self.lo, float(x.amin().item()))
        self.hi = max(self.hi, float(x.amax().item()))

    def qparams(self, scheme: QuantScheme) -> tuple[float, int | None]:
        """(scale, zero point or None) of a per-tensor `scheme` for what was observed."""
        if self.lo > self.hi:
            raise QuantSchemeError(f"{scheme}: {type(self).__name__} has observed nothing; run calibration batches")
        return _from_range(self.lo, self.hi, scheme)


class PercentileObserver(MinMaxObserver):
    """The mean over batches of the `percentile` (e.g. 99.9) of each batch (|x| for symmetric schemes)."""

    def __init__(self, percentile: float = 99.99) -> None:
        if not 0 < percentile <= 100:
            raise ValueError(f"PercentileObserver: percentile must be in (0, 100], got {percentile}")
        self.percentile = percentile
        self.los: list[float] = []
        self.his: list[float] = []
        self.abs: list[float] = []
        super().__init__()

    def observe(self, x: Tensor) -> None:
        values = np.asarray(x.numpy(), np.float32).reshape(-1)
        self.los.append(float(np.percentile(values, 100 - self.percentile)))
        self.his.append(float(np.percentile(values, self.percentile)))
        self.abs.append(float(np.percentile(np.abs(values), self.percentile)))
        self.lo, self.hi = float(np.mean(self.los)), float(np.mean(self.his))

    def qparams(self, scheme: QuantScheme) -> tuple[float, int | None]:
        if not self.abs:
            return super().qparams(scheme)
        if scheme.mode == "affine":
            return _from_range(self.lo, self.hi, scheme)
        top = float(np.mean(self.abs))
        return _from_range(-top, top, scheme)


class AbsMeanObserver:
    """The running mean of |x| over every element observed, taken as the code unit (BitNet b1.58)."""

    def __init__(self) -> None:
        self.total, self.count = 0.0, 0

    def observe(self, x: Tensor) -> None:
        self.total += float(x.abs().sum().item())
        self.count += x.numel

    def qparams(self, scheme: QuantScheme) -> tuple[float, int | None]:
        if scheme.mode == "affine" or not scheme.is_int:
            raise QuantSchemeError(f"{scheme}: AbsMeanObserver gives the unit of symmetric integer codes")
        if not self.count:
            raise QuantSchemeError(f"{scheme}: AbsMeanObserver has observed nothing; run calibration batches")
        return float(np.float32(self.total / self.count)), None
