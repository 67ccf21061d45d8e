"""The closed-form schedules: Constant, Step, MultiStep, Exponential, CosineAnnealing (with linear
warmup), Linear, OneCycle, Noam. Each matches the lr sequence of the PyTorch scheduler of that name
(Noam: the formula of "Attention Is All You Need"). `base` below is the optimizer's initial lr."""

from __future__ import annotations

import bisect
import math
import numbers
from typing import Sequence

from .scheduler import Scheduler, check


class Constant(Scheduler):
    """`lr = base * factor` for the first `total_iters` steps, then `base` (PyTorch's ConstantLR; the
    defaults keep the lr constant).

    Example:
        >>> sched = Constant(opt, factor=0.5, total_iters=3)
    """

    def __init__(self, optimizer, factor: float = 1.0, total_iters: int = 0) -> None:
        check("Constant", "factor", factor, low=0, high=1)
        check("Constant", "total_iters", total_iters, kind=numbers.Integral, low=0)
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer)

    def lr_at(self, t: int) -> float:
        return self.base_lr * (self.factor if t < self.total_iters else 1.0)


class Step(Scheduler):
    """`lr = base * gamma ** (t // step_size)` (PyTorch's StepLR).

    Example:
        >>> sched = Step(opt, step_size=30, gamma=0.1)
    """

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1) -> None:
        check("Step", "step_size", step_size, kind=numbers.Integral, low=0, low_open=True)
        check("Step", "gamma", gamma, low=0)
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer)

    def lr_at(self, t: int) -> float:
        return self.base_lr * self.gamma ** (t // self.step_size)


class MultiStep(Scheduler):
    """`lr = base * gamma ** (number of milestones <= t)` (PyTorch's MultiStepLR).

    Example:
        >>> sched = MultiStep(opt, milestones=[30, 80], gamma=0.1)
    """

    def __init__(self, optimizer, milestones: Sequence[int], gamma: float = 0.1) -> None:
        milestones = list(milestones)
        for m in milestones:
            check("MultiStep", "each milestone", m, kind=numbers.Integral, low=0)
        check("MultiStep", "gamma", gamma, low=0)
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer)

    def lr_at(self, t: int) -> float:
        return self.base_lr * self.gamma ** bisect.bisect_right(self.milestones, t)


class Exponential(Scheduler):
    """`lr = base * gamma ** t` (PyTorch's ExponentialLR).

    Example:
        >>> sched = Exponential(opt, gamma=0.95)
    """

    def __init__(self, optimizer, gamma: float) -> None:
        check("Exponential", "gamma", gamma, low=0)
        self.gamma = gamma
        super().__init__(optimizer)

    def lr_at(self, t: int) -> float:
        return self.base_lr * self.gamma ** t


class CosineAnnealing(Scheduler):
    """Cosine annealing from `base` to `eta_min` over `T_max` steps, after an optional linear warmup.

        t < warmup:   lr = base * (warmup_start + (1 - warmup_start) * t / warmup)
        otherwise:    lr = eta_min + (base - eta_min) * (1 + cos(pi * (t - warmup) / T_max)) / 2

    Without warmup this is PyTorch's CosineAnnealingLR (past `T_max` the cosine rises again, as
    there); with it, `SequentialLR(LinearLR(warmup_start, 1, warmup), CosineAnnealingLR(T_max),
    milestones=[warmup])`. `T_max` counts the steps after the warmup.

    Example:
        >>> sched = CosineAnnealing(opt, T_max=1000, warmup=100)
    """

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, warmup: int = 0,  # noqa: N803
                 warmup_start: float = 0.0) -> None:
        check("CosineAnnealing", "T_max", T_max, kind=numbers.Integral, low=0, low_open=True)
        check("CosineAnnealing", "eta_min", eta_min, low=0)
        check("CosineAnnealing", "warmup", warmup, kind=numbers.Integral, low=0)
        check("CosineAnnealing", "warmup_start", warmup_start, low=0, high=1)
        self.T_max, self.eta_min, self.warmup, self.warmup_start = T_max, eta_min, warmup, warmup_start
        super().__init__(optimizer)

    def lr_at(self, t: int) -> float:
        if t < self.warmup:
            return self.base_lr * (self.warmup_start + (1 - self.warmup_start) * t / self.warmup)
        u = t - self.warmup
        return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * u / self.T_max)) / 2


class Linear(Scheduler):
    """`lr = base * (start_factor + (end_factor - start_factor) * min(t, total_iters) / total_iters)`
    (PyTorch's LinearLR, same defaults).

    Example:
        >>> sched = Linear(opt, start_factor=1.0, end_factor=0.0, total_iters=10_000)
    """

    def __init__(self, optimizer, start_factor: float = 1 / 3, end_factor: float = 1.0, total_iters: int = 5) -> None:
        check("Linear", "start_factor", start_factor, low=0, high=1)
        check("Linear", "end_factor", end_factor, low=0, high=1)
        check("Linear", "total_iters", total_iters, kind=numbers.Integral, low=0, low_open=True)
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer)

    def lr_at(self, t: int) -> float:
        done = min(t, self.total_iters) / self.total_iters
        return self.base_lr * (self.start_factor + (self.end_factor - self.start_factor) * done)


class OneCycle(Scheduler):
    """The 1cycle policy (Smith & Topin, 2018), PyTorch's OneCycleLR for the lr (momentum is not
    cycled). The lr ignores the optimizer's own and runs, by `anneal_strategy` ("cos" or "linear"):

        max_lr / div_factor  ->  max_lr                  over the first pct_start * total_steps - 1 steps
        max_lr  ->  max_lr / (div_factor * final_div_factor)               until step total_steps - 1

    With `three_phase=True` it comes back to the initial lr symmetrically before the final decay.
    The step `t = total_steps` (the `sched.step()` after the last `opt.step`) keeps the final lr where
    PyTorch extrapolates the last phase (linear annealing then goes negative); stepping further raises,
    as in PyTorch.

    Example:
        >>> sched = OneCycle(opt, max_lr=0.1, total_steps=1000)
    """

    def __init__(self, optimizer, max_lr: float, total_steps: int, pct_start: float = 0.3,
                 anneal_strategy: str = "cos", div_factor: float = 25.0, final_div_factor: float = 1e4,
                 three_phase: bool = False) -> None:
        check("OneCycle", "max_lr", max_lr, low=0)
        check("OneCycle", "total_steps", total_steps, kind=numbers.Integral, low=0, low_open=True)
        check("OneCycle", "pct_start", pct_start, low=0, high=1)
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"OneCycle: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        self.total_steps, self.anneal = total_steps, anneal_strategy
        initial = max_lr / div_factor
        final = initial / final_div_factor
        peak = float(pct_start * total_steps) - 1
        # (last step of the phase, lr at its start, lr at its end), PyTorch's phase table
        if three_phase:
            self.phases = [(peak, initial, max_lr), (2 * peak, max_lr, initial), (total_steps - 1, initial, final)]
        else:
            self.phases = [(peak, initial, max_lr), (total_steps - 1, max_lr, final)]
        super().__init__(optimizer)

    def lr_at(self, t: int) -> float:
        if t > self.total_steps:
            raise ValueError(f"OneCycle: stepped {t} times, past total_steps={self.total_steps}")
        start, (*early, phase) = 0.0, self.phases
        for candidate in early:
            if t <= candidate[0]:
                phase = candidate
                break
            start = candidate[0]
        end, lr_from, lr_to = phase
        pct = min(1.0, (t - start) / (end - start))
        if self.anneal == "linear":
            return (lr_to - lr_from) * pct + lr_from
        return lr_to + (lr_from - lr_to) / 2 * (math.cos(math.pi * pct) + 1)


class Noam(Scheduler):
    """The Transformer schedule (Vaswani et al., 2017), with `s = t + 1`:

        lr = base * d_model ** -0.5 * min(s ** -0.5, s * warmup ** -1.5)

    It rises linearly for `warmup` steps, then decays as 1/sqrt(s); `base` scales it (1.0 gives the
    paper's values; the peak at s = warmup is base / sqrt(d_model * warmup)).

    Example:
        >>> sched = Noam(opt, d_model=512, warmup=4000)
    """

    def __init__(self, optimizer, d_model: int, warmup: int) -> None:
        check("Noam", "d_model", d_model, kind=numbers.Integral, low=0, low_open=True)
        check("Noam", "warmup", warmup, kind=numbers.Integral, low=0, low_open=True)
        self.d_model, self.warmup = d_model, warmup
        super().__init__(optimizer)

    def lr_at(self, t: int) -> float:
        s = t + 1
        return self.base_lr * self.d_model ** -0.5 * min(s ** -0.5, s * self.warmup ** -1.5)
