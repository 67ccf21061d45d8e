"""`Callback`: hooks into a `Learner`'s fit loop (override the ones you need).

A callback can read the learner (`learner.model`, `learner.step`, `learner.epoch`) and ask the run
to stop after the current step with `learner.request_stop()`, as Ctrl-C does.

Example:
    >>> class StopAfter(Callback):
    ...     def __init__(self, steps): self.steps = steps
    ...     def on_step_end(self, learner):
    ...         if learner.step >= self.steps:
    ...             learner.request_stop()
"""

from __future__ import annotations

from typing import Any


class Callback:
    """Base class of fit-loop hooks; each does nothing by default."""

    def on_fit_start(self, learner: Any) -> None:
        """Before the first epoch (after a resume has restored the state)."""

    def on_step_end(self, learner: Any) -> None:
        """After each optimizer step and its metric updates."""

    def on_epoch_end(self, learner: Any, values: dict[str, dict[str, float | None]]) -> None:
        """After validation, the checkpoint and the metric files of an epoch; `values[split][metric]`."""

    def on_fit_end(self, learner: Any, result: Any) -> None:
        """After the run ends (finished, stopped early or interrupted), with its `FitResult`."""
