"""`Scheduler`: the base of learning-rate schedules. A schedule is a closed-form function of the step
count `t`; `step()` advances `t` and writes the lr into the optimizer.

The optimizer's `initial_lr` (the lr it was built with) is the schedule's `base_lr`, as PyTorch's
`initial_lr`; groups and delegates follow `opt.lr` by ratio (see `ember.optim.optimizer`). Building a
scheduler sets the lr of step 0; call `sched.step()` after each `opt.step(...)`, as in PyTorch.

Example:
    >>> sched = Exponential(opt, gamma=0.9)
    >>> opt.step(grads); sched.step()
    >>> sched.lr == opt.lr == opt.initial_lr * 0.9
    True
"""

from __future__ import annotations

import numbers
from typing import Any


class Scheduler:
    """Base class of lr schedules: subclasses define `lr_at(t)` (see the module docs).

    Example:
        >>> class Halving(Scheduler):
        ...     def lr_at(self, t):
        ...         return self.base_lr * 0.5 ** t
    """

    def __init__(self, optimizer) -> None:
        if not (hasattr(optimizer, "lr") and hasattr(optimizer, "initial_lr")):
            raise TypeError(f"{type(self).__name__} schedules an ember Optimizer, got {type(optimizer).__name__}")
        self.optimizer = optimizer
        self.base_lr: float = optimizer.initial_lr
        self.t = 0
        self.optimizer.lr = self.lr_at(0)

    def lr_at(self, t: int) -> float:
        """The learning rate after `t` calls of `step()`."""
        raise NotImplementedError(f"{type(self).__name__} does not define lr_at()")

    @property
    def lr(self) -> float:
        """The learning rate of the current step."""
        return self.lr_at(self.t)

    def step(self) -> float:
        """Advance one step, set the optimizer's lr and return it."""
        self.t += 1
        lr = self.optimizer.lr = self.lr_at(self.t)
        return lr

    def state_dict(self) -> dict[str, Any]:
        """`{"scheduler": name, "t": steps taken}`: the schedule itself is rebuilt from its arguments."""
        return {"scheduler": type(self).__name__, "t": self.t}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at the saved step (and set the optimizer's lr to it)."""
        if state.get("scheduler") != type(self).__name__:
            raise ValueError(f"{type(self).__name__}.load_state_dict: the state is of scheduler "
                             f"{state.get('scheduler')!r}")
        self.t = int(state["t"])
        self.optimizer.lr = self.lr_at(self.t)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(t={self.t}, lr={self.lr:.6g})"


def check(who: str, name: str, value, *, kind: type = numbers.Real, low: float | None = None,
          high: float | None = None, low_open: bool = False) -> None:
    """Raise naming `who` and `name` unless `value` is a `kind` in [low, high] (`(low, high]` if `low_open`)."""
    if isinstance(value, bool) or not isinstance(value, kind):
        raise TypeError(f"{who}: {name} must be {'an int' if kind is numbers.Integral else 'a number'}, got {value!r}")
    if low is not None and (value <= low if low_open else value < low):
        raise ValueError(f"{who}: {name} must be {'>' if low_open else '>='} {low}, got {value}")
    if high is not None and value > high:
        raise ValueError(f"{who}: {name} must be <= {high}, got {value}")
