"""`EarlyStopping`: stop when a metric has not improved for `patience` epochs, after a warm-up.

Epochs up to `warmup` are ignored (neither a best value nor a missed improvement), since early epochs
of a run are noisy. After that, an epoch improves when its value beats the best so far by more than
`min_delta`; `patience` epochs in a row without improvement stop the run.

Example:
    >>> stop = EarlyStopping("valid/loss", patience=2, warmup=1, higher_is_better=False)
    >>> [stop.update(epoch, v) for epoch, v in enumerate([9.0, 1.0, 2.0, 3.0], start=1)]
    [False, False, False, True]
"""

from __future__ import annotations

from typing import Any


class EarlyStopping:
    """Stop on `patience` epochs without improvement of `metric` (see the module docs).

    Args:
        metric: "split/name", e.g. "valid/loss" or "valid/accuracy".
        patience: epochs without improvement that stop the run (>= 1).
        warmup: the first epochs, ignored.
        min_delta: how much better a value must be to count as an improvement.
        higher_is_better: the metric's direction; None lets a `Learner` take it from the metric.
    """

    def __init__(self, metric: str, patience: int = 3, warmup: int = 0, min_delta: float = 0.0,
                 higher_is_better: bool | None = None) -> None:
        if "/" not in metric:
            raise ValueError(f"EarlyStopping metric must be 'split/name' such as 'valid/loss', got {metric!r}")
        for key, value, least in (("patience", patience, 1), ("warmup", warmup, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"EarlyStopping {key} must be an int >= {least}, got {value!r}")
        if not min_delta >= 0:
            raise ValueError(f"EarlyStopping min_delta must be >= 0, got {min_delta!r}")
        self.metric, self.patience, self.warmup, self.min_delta = metric, patience, warmup, float(min_delta)
        self.higher_is_better = higher_is_better
        self.best: float | None = None
        self.best_epoch: int | None = None
        self.waited = 0

    def update(self, epoch: int, value: float | None) -> bool:
        """Record `value` of the 1-based `epoch`; True when the run should stop."""
        if epoch <= self.warmup or value is None:
            return False
        if self.higher_is_better is None:
            raise ValueError(f"{self!r}: higher_is_better is not set; pass it, or hand this to a Learner, "
                             f"which takes it from the metric")
        sign = 1.0 if self.higher_is_better else -1.0
        if self.best is None or sign * (value - self.best) > self.min_delta:
            self.best, self.best_epoch, self.waited = value, epoch, 0
            return False
        self.waited += 1
        return self.waited >= self.patience

    def state_dict(self) -> dict[str, Any]:
        """The best value, its epoch and the epochs waited since."""
        return {"best": self.best, "best_epoch": self.best_epoch, "waited": self.waited}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""
        self.best, self.best_epoch, self.waited = state["best"], state["best_epoch"], int(state["waited"])

    def __repr__(self) -> str:
        return (f"EarlyStopping({self.metric!r}, patience={self.patience}, warmup={self.warmup}, "
                f"min_delta={self.min_delta})")
