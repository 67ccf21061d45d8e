"""Schedules built from schedules: `Sequential` switches at milestones, `Composed` multiplies factors.

The parts are schedules on the same optimizer, used only through their `lr_at`: step the composite,
not the parts.
"""

from __future__ import annotations

import bisect
import math
import numbers
from typing import Sequence

from .scheduler import Scheduler, check


def _parts(who: str, optimizer, schedulers: Sequence[Scheduler]) -> list[Scheduler]:
    schedulers = list(schedulers)
    if not schedulers:
        raise ValueError(f"{who}: needs at least one scheduler")
    for s in schedulers:
        if not isinstance(s, Scheduler):
            raise TypeError(f"{who}: expected schedulers, got {type(s).__name__}")
        if s.optimizer is not optimizer:
            raise ValueError(f"{who}: every scheduler must be built on the same optimizer")
    return schedulers


class Sequential(Scheduler):
    """Scheduler `i` runs from milestone `i-1` (restarting its own count at 0) to milestone `i`
    (PyTorch's SequentialLR):

        lr(t) = schedulers[i].lr_at(t - milestones[i-1])   for milestones[i-1] <= t < milestones[i]

    Example:
        >>> warm = Linear(opt, start_factor=0.01, total_iters=100)
        >>> sched = Sequential(opt, [warm, CosineAnnealing(opt, T_max=900)], milestones=[100])
    """

    def __init__(self, optimizer, schedulers: Sequence[Scheduler], milestones: Sequence[int]) -> None:
        self.schedulers = _parts("Sequential", optimizer, schedulers)
        self.milestones = list(milestones)
        if len(self.milestones) != len(self.schedulers) - 1:
            raise ValueError(f"Sequential: {len(self.schedulers)} schedulers need {len(self.schedulers) - 1} "
                             f"milestone(s), got {len(self.milestones)}")
        for m in self.milestones:
            check("Sequential", "each milestone", m, kind=numbers.Integral, low=0, low_open=True)
        if self.milestones != sorted(set(self.milestones)):
            raise ValueError(f"Sequential: milestones must increase, got {self.milestones}")
        super().__init__(optimizer)

    def lr_at(self, t: int) -> float:
        i = bisect.bisect_right(self.milestones, t)
        return self.schedulers[i].lr_at(t - (self.milestones[i - 1] if i else 0))


class Composed(Scheduler):
    """The product of the parts' factors (PyTorch's ChainedScheduler for multiplicative schedules):

        lr(t) = base * prod_i (schedulers[i].lr_at(t) / base)

    Example:
        >>> sched = Composed(opt, [Linear(opt, start_factor=0.1, total_iters=10), Exponential(opt, 0.99)])
    """

    def __init__(self, optimizer, schedulers: Sequence[Scheduler]) -> None:
        self.schedulers = _parts("Composed", optimizer, schedulers)
        if optimizer.initial_lr == 0:
            raise ValueError("Composed: the optimizer's lr must be nonzero to turn schedules into factors")
        super().__init__(optimizer)

    def lr_at(self, t: int) -> float:
        return self.base_lr * math.prod(s.lr_at(t) / self.base_lr for s in self.schedulers)
