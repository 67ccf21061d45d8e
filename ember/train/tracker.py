"""`MetricTracker`: the running and epoch values of a split's metrics.

For each metric it keeps the merged state of the whole epoch so far and the states of the last
`window` batches. `epoch()` is the value over the epoch, `running()` over the window: the number the
dashboard shows while an epoch is under way. `state_dict()` holds both, so a run resumed mid-epoch ends
the epoch with the same values as one that was never stopped.

Example:
    >>> t = MetricTracker([Loss()], window=2)
    >>> for loss in (4.0, 2.0, 0.0):
    ...     t.update(Observation(loss, items=1))
    >>> t.running()["loss"], t.epoch()["loss"]
    (1.0, 2.0)
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Iterator, Mapping, Sequence

from .metrics import Metric, Observation


class MetricTracker:
    """Running (last `window` batches) and epoch values of `metrics` (see the module docs)."""

    def __init__(self, metrics: Sequence[Metric], window: int = 20) -> None:
        if not isinstance(window, int) or window < 1:
            raise ValueError(f"MetricTracker window must be a positive int, got {window!r}")
        names = [m.name for m in metrics]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ValueError(f"metric names must be unique, {duplicated} appear more than once; "
                             f"give one of them another name (metric.name = ...)")
        self.metrics = list(metrics)
        self.window = window
        self.reset()

    def reset(self) -> None:
        """Start a new epoch."""
        self._epoch: dict[str, Any] = {m.name: None for m in self.metrics}
        self._recent: dict[str, deque] = {m.name: deque(maxlen=self.window) for m in self.metrics}
        self.batches = 0

    def update(self, obs: Observation) -> None:
        """Add one batch."""
        for m in self.metrics:
            state = m.observe(obs)
            self._epoch[m.name] = m.merge(self._epoch[m.name], state)
            self._recent[m.name].append(state)
        self.batches += 1

    def epoch(self) -> dict[str, float | None]:
        """Each metric's value over the epoch so far (None before any batch)."""
        return {m.name: _value(m, self._epoch[m.name]) for m in self.metrics}

    def epoch_over(self, states: Sequence[dict[str, Any]]) -> dict[str, float | None]:
        """Each metric's value over several trackers' epoch states merged in order (`state_dict()["epoch"]`
        of each rank of a data-parallel run)."""
        values = {}
        for m in self.metrics:
            merged = None
            for s in states:
                merged = m.merge(merged, s[m.name])
            values[m.name] = _value(m, merged)
        return values

    def running(self) -> dict[str, float | None]:
        """Each metric's value over the last `window` batches."""
        values = {}
        for m in self.metrics:
            state = None
            for s in self._recent[m.name]:
                state = m.merge(state, s)
            values[m.name] = _value(m, state)
        return values

    def format(self, values: dict[str, float | None]) -> dict[str, str]:
        """`values` as each metric formats them."""
        return {m.name: m.format(values.get(m.name)) for m in self.metrics}

    def formatted_running(self) -> Mapping[str, str]:
        """`format(running())`, computed when first read: the learner hands it to the display after
        every batch, and a display that does not show batches (the plain log) never pays for it.

        Example:
            >>> t = MetricTracker([Loss()])
            >>> t.update(Observation(0.5, items=2))
            >>> dict(t.formatted_running())
            {'loss': '0.5000'}
        """
        return _OnFirstRead(lambda: self.format(self.running()))

    def state_dict(self) -> dict[str, Any]:
        """The epoch and window states (NumPy arrays and lists), for a checkpoint."""
        return {"batches": self.batches, "epoch": dict(self._epoch),
                "recent": {name: list(states) for name, states in self._recent.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned (the metrics must have the same names)."""
        names = {m.name for m in self.metrics}
        if set(state["epoch"]) != names:
            raise ValueError(f"tracker state has metrics {sorted(state['epoch'])}, this learner "
                             f"{sorted(names)}")
        self.batches = int(state["batches"])
        self._epoch = dict(state["epoch"])
        self._recent = {name: deque(states, maxlen=self.window) for name, states in state["recent"].items()}


class _OnFirstRead(Mapping[str, str]):
    """The mapping `make()` returns, made on first access and kept."""

    __slots__ = ("_make", "_values")

    def __init__(self, make: Callable[[], dict[str, str]]) -> None:
        self._make: Callable[[], dict[str, str]] | None = make
        self._values: dict[str, str] = {}

    def _get(self) -> dict[str, str]:
        if self._make is not None:
            self._values, self._make = self._make(), None
        return self._values

    def __getitem__(self, key: str) -> str:
        return self._get()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __repr__(self) -> str:
        return repr(self._get())


def _value(metric: Metric, state: Any) -> float | None:
    return None if state is None else metric.compute(state)
