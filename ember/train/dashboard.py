"""What a run shows while it trains: a live `rich` dashboard on a terminal, a line per epoch otherwise.

The learner reports events to a `Display`: a split starts, a batch ends (with running metric values),
an epoch ends (with an `EpochView`), a message. `RichDashboard` draws progress bars per split, a table
of the current and best values and a sparkline per metric over the epochs; `PlainLog` prints one line
per epoch, which suits log files and CI. `make_display("auto")` picks the dashboard when stdout is a
terminal and `rich` is installed (`pip install 'ember[train]'`), else the plain log.

Example:
    >>> from io import StringIO
    >>> log = PlainLog(file=StringIO())
    >>> log.epoch_end(EpochView(1, 3, 2.5, {"train": {"loss": "0.5000"}}, {}, {}))
    >>> log.file.getvalue()
    'epoch 1/3 | train loss 0.5000 | 2.5 s\\n'
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import IO, Any, Mapping

_SPARKS = "▁▂▃▄▅▆▇█"


@dataclass
class EpochView:
    """What an epoch's end shows.

    Args:
        epoch: the 1-based epoch just finished.
        epochs: the epochs the run asked for.
        seconds: wall time of the epoch, validation included.
        values: split -> metric -> formatted epoch value.
        best: metric -> formatted best value and its epoch (metrics with a direction).
        curves: metric -> its epoch values so far, for sparklines (validation values where there are).
    """

    epoch: int
    epochs: int
    seconds: float
    values: dict[str, dict[str, str]]
    best: dict[str, str] = field(default_factory=dict)
    curves: dict[str, list[float]] = field(default_factory=dict)


class Display:
    """Receives a run's events; the base class ignores them all (`make_display("none")`).

    Example:
        >>> Display().message("nothing is shown")
    """

    def start(self, epochs: int, first_epoch: int) -> None:
        """The run starts (or resumes) at the 1-based `first_epoch` of `epochs`."""

    def split_start(self, split: str, epoch: int, total: int | None) -> None:
        """A pass over `split` begins, of `total` batches (None when the loader has no length)."""

    def batch(self, split: str, done: int, total: int | None, running: Mapping[str, str]) -> None:
        """`done` batches of the pass are finished; `running` holds formatted running values (a
        mapping computed when first read: a display that skips a batch costs nothing)."""

    def epoch_end(self, view: EpochView) -> None:
        """An epoch (training and validation) is finished."""

    def message(self, text: str) -> None:
        """A note for the user (a checkpoint saved on Ctrl-C, early stopping, ...)."""

    def close(self) -> None:
        """The run is over; release the terminal."""


class PlainLog(Display):
    """One line per epoch (and per message) on `file`, stdout by default.

    Example:
        >>> PlainLog().message("resumed from runs/mnist/checkpoints/epoch0001-step00000063")
        resumed from runs/mnist/checkpoints/epoch0001-step00000063
    """

    def __init__(self, file: IO[str] | None = None) -> None:
        self.file = file if file is not None else sys.stdout

    def epoch_end(self, view: EpochView) -> None:
        parts = [f"epoch {view.epoch}/{view.epochs}"]
        for split, values in view.values.items():
            parts.append(split + " " + " ".join(f"{k} {v}" for k, v in values.items()))
        parts.append(f"{view.seconds:.1f} s")
        self._write(" | ".join(parts))

    def message(self, text: str) -> None:
        self._write(text)

    def _write(self, line: str) -> None:
        self.file.write(line + "\n")
        self.file.flush()


def sparkline(values: list[float], width: int = 30) -> str:
    """The last `width` values as block characters scaled from their min to their max.

    Example:
        >>> sparkline([3.0, 2.0, 1.0, 1.0])
        '█▅▁▁'
    """
    values = [v for v in values[-width:] if v is not None and v == v]
    if not values:
        return ""
    low, high = min(values), max(values)
    span = high - low
    if span == 0:
        return _SPARKS[len(_SPARKS) // 2] * len(values)
    return "".join(_SPARKS[round((v - low) / span * (len(_SPARKS) - 1))] for v in values)


class RichDashboard(Display):
    """A live terminal dashboard drawn with `rich` (see the module docs).

    Args:
        console: a `rich.console.Console`; a new one on stdout by default. Tests pass one that
            records to a string.
        refresh_per_second: the most redraws per second between batches (epoch ends always redraw).

    Example:
        >>> from rich.console import Console
        >>> dash = RichDashboard(Console(file=StringIO(), width=100))
        >>> dash.console.print(dash.render())
    """

    def __init__(self, console: Any = None, refresh_per_second: float = 8.0) -> None:
        rich = _require_rich()
        self.console = console if console is not None else rich.console.Console()
        self._rich = rich
        self._interval = 1.0 / refresh_per_second
        self._last_draw = 0.0
        self._progress = rich.progress.Progress(
            rich.progress.TextColumn("{task.description:>5}"), rich.progress.BarColumn(),
            rich.progress.MofNCompleteColumn(), rich.progress.TimeElapsedColumn(),
            rich.progress.TextColumn("eta"), rich.progress.TimeRemainingColumn(),
            console=self.console, auto_refresh=False)
        self._tasks: dict[str, Any] = {}
        self._current: dict[str, dict[str, str]] = {}
        self._view: EpochView | None = None
        self._title = "training"
        self._epochs: int | None = None
        self._live = None

    def start(self, epochs: int, first_epoch: int) -> None:
        self._title = f"epoch {first_epoch}/{epochs}"
        self._epochs = epochs
        self._live = self._rich.live.Live(self.render(), console=self.console, auto_refresh=False)
        self._live.start()

    def split_start(self, split: str, epoch: int, total: int | None) -> None:
        self._title = f"epoch {epoch}/{self._epochs or epoch}"
        if split not in self._tasks:
            self._tasks[split] = self._progress.add_task(split, total=total)
        else:
            self._progress.reset(self._tasks[split], total=total)
        self._draw(force=True)

    def batch(self, split: str, done: int, total: int | None, running: Mapping[str, str]) -> None:
        self._progress.update(self._tasks[split], completed=done, total=total)
        self._current[split] = running
        self._draw(force=False)

    def epoch_end(self, view: EpochView) -> None:
        self._view = view
        self._current = {split: dict(values) for split, values in view.values.items()}
        self._draw(force=True)

    def message(self, text: str) -> None:
        if self._live is not None:
            self._live.console.print(text)
        else:
            self.console.print(text)

    def close(self) -> None:
        if self._live is not None:
            self._draw(force=True)
            self._live.stop()
            self._live = None

    def render(self) -> Any:
        """The dashboard as a rich renderable: title, progress bars, the metrics table."""
        rich = self._rich
        table = rich.table.Table(box=rich.box.SIMPLE_HEAD, expand=False)
        table.add_column("metric")
        splits = list(self._current) or ["train"]
        for split in splits:
            table.add_column(split, justify="right")
        table.add_column("best", justify="right")
        table.add_column("per epoch")
        view = self._view
        names = list(dict.fromkeys(name for values in self._current.values() for name in values))
        for name in names:
            cells = [self._current.get(split, {}).get(name, "") for split in splits]
            best = view.best.get(name, "") if view else ""
            curve = sparkline(view.curves.get(name, [])) if view else ""
            table.add_row(name, *cells, best, curve)
        subtitle = f" · last epoch {view.seconds:.1f} s" if view else ""
        title = rich.text.Text(self._title + subtitle, style="bold")
        return rich.console.Group(title, self._progress, table)

    def _draw(self, force: bool) -> None:
        now = time.monotonic()
        if self._live is None or (not force and now - self._last_draw < self._interval):
            return
        self._last_draw = now
        self._live.update(self.render(), refresh=True)


def make_display(mode: str = "auto", file: IO[str] | None = None) -> Display:
    """The display for `mode`: "auto" (dashboard on a terminal with rich installed, else plain),
    "rich", "plain" or "none".

    Example:
        >>> type(make_display("plain")).__name__
        'PlainLog'
    """
    if mode == "none":
        return Display()
    if mode == "plain":
        return PlainLog(file)
    if mode == "rich":
        return RichDashboard()
    if mode == "auto":
        stream = file if file is not None else sys.stdout
        if getattr(stream, "isatty", lambda: False)() and _rich_installed():
            return RichDashboard()
        return PlainLog(file)
    raise ValueError(f"display must be 'auto', 'rich', 'plain' or 'none', got {mode!r}")


def _rich_installed() -> bool:
    try:
        _require_rich()
    except ImportError:
        return False
    return True


def _require_rich() -> Any:
    try:
        import rich.box
        import rich.console
        import rich.live
        import rich.progress
        import rich.table
        import rich.text
    except ImportError:
        raise ImportError("the live dashboard needs rich: pip install 'ember[train]' "
                          "(or pass display='plain')") from None
    return rich
