"""PNG plots of a run's metric curves, one file per metric with a line per split (matplotlib).

matplotlib is optional (`pip install 'ember[train]'`); without it `plot_history` raises ImportError
naming the extra, and the learner notes the skipped plots in summary.json. Figures are drawn on the
Agg canvas directly, never through pyplot, so plotting changes no global matplotlib state.

Example:
    >>> plot_history([{"epoch": 1, "split": "train", "loss": 0.9},
    ...               {"epoch": 2, "split": "train", "loss": 0.5}], "runs/x/plots")
    ['runs/x/plots/loss.png']
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any, Sequence

from ..config import write_atomic

RECORD_KEYS = ("epoch", "split", "step", "time")


def plot_history(history: Sequence[dict[str, Any]], folder: str | os.PathLike,
                 names: Sequence[str] | None = None) -> list[str]:
    """Write `<metric>.png` under `folder` for each of `names` (default: every metric) with a number in
    `history`; returns the paths."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        raise ImportError("plots need matplotlib: pip install 'ember[train]'") from None
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if names is None:
        names = list(dict.fromkeys(k for record in history for k in record if k not in RECORD_KEYS))
    written = []
    for name in names:
        curves: dict[str, tuple[list[int], list[float]]] = {}
        for record in history:
            value = record.get(name)
            if isinstance(value, (int, float)) and value == value:
                xs, ys = curves.setdefault(record["split"], ([], []))
                xs.append(record["epoch"])
                ys.append(value)
        if not curves:
            continue
        figure = Figure(figsize=(5, 3.2), dpi=100)
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        for split, (xs, ys) in curves.items():
            axes.plot(xs, ys, marker="o", markersize=3, label=split)
        axes.set_xlabel("epoch")
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.set_ylabel(name)
        axes.grid(alpha=0.3)
        axes.legend()
        figure.subplots_adjust(left=0.16, right=0.97, top=0.95, bottom=0.16)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
        path = folder / f"{name}.png"
        write_atomic(path, buffer.getvalue())
        written.append(str(path))
    return written
