"""What a run is at a step boundary (`RunState`, saved in checkpoints besides the model, optimizer and
scheduler), and how it ended (`FitResult`, written to summary.json).

Example:
    >>> saved = RunState(epoch=2, position=5, step=17).tree(seconds=3.5)
    >>> restored = RunState()
    >>> restored.load(saved)
    >>> restored.step
    17
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .. import random as ember_random

CHECKPOINT_FORMAT = 1


@dataclass
class FitResult:
    """How a `fit` ended; `to_dict()` is what summary.json holds.

    Attributes:
        epochs_completed: whole epochs trained (validation included).
        steps: optimizer steps taken.
        best: `{"metric", "value", "epoch"}` of the best epoch, or None.
        final: "split/metric" -> value of the last finished epoch.
        interrupted: stopped by Ctrl-C or `request_stop()` (a checkpoint was saved with a run_dir).
        stopped_early: stopped by early stopping.
        seconds: wall time of training, summed over resumed sessions.
        checkpoint: the newest checkpoint, or None without a run_dir.
        plots: the PNG files written; `plots_note` says why there are none.
    """

    epochs_completed: int
    steps: int
    best: dict[str, Any] | None
    final: dict[str, float | None]
    interrupted: bool
    stopped_early: bool
    seconds: float
    checkpoint: str | None = None
    plots: list[str] = field(default_factory=list)
    plots_note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunState:
    """The state of a run that a checkpoint saves (besides model, optimizer and scheduler)."""

    epoch: int = 0          # whole epochs done
    position: int = 0       # batches of the current epoch done (at the last optimizer step)
    step: int = 0           # optimizer steps done
    seconds: float = 0.0    # wall time of earlier sessions of this run
    history: list = field(default_factory=list)
    best: dict | None = None
    rng: dict | None = None  # RNG streams at the last step boundary
    interrupted: bool = False
    stopped_early: bool = False

    def tree(self, seconds: float) -> dict[str, Any]:
        """The checkpoint entries of the run, with `seconds` of wall time so far."""
        return {"format": CHECKPOINT_FORMAT, "epoch": self.epoch, "position": self.position, "step": self.step,
                "seconds": seconds, "history": self.history, "best": self.best,
                "rng": self.rng if self.rng is not None else ember_random.get_state()}

    def load(self, tree: dict[str, Any]) -> None:
        """Take the run entries of a checkpoint tree."""
        if tree.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"checkpoint format {tree.get('format')!r} is not {CHECKPOINT_FORMAT}, the one this "
                             f"version of ember writes")
        self.epoch, self.position, self.step = tree["epoch"], tree["position"], tree["step"]
        self.seconds, self.history, self.best, self.rng = tree["seconds"], tree["history"], tree["best"], tree["rng"]
