"""`RunDirectory`: the files a training run leaves behind.

    runs/mnist/
      config.json        the run's Config (or dict), when one is given
      metrics.jsonl      one JSON object per (epoch, split): epoch, split, step, time, metric values
      metrics.csv        the same as a table
      checkpoints/       see `ember.train.checkpoint`
      summary.json       best epoch and value, final metrics, wall time, whether it was interrupted
      plots/<metric>.png curves per split (needs matplotlib; summary.json notes when skipped)

Every file is written atomically and rewritten whole from the run's history, so a resumed run leaves
the same files as one that was never stopped.

Example:
    >>> run = RunDirectory("runs/mnist")
    >>> run.write_metrics([{"epoch": 1, "split": "train", "step": 63, "time": 9.5, "loss": 0.41}])
    >>> (run.path / "metrics.csv").read_text().splitlines()[0]
    'epoch,split,step,time,loss'
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any, Sequence

from ..config import Config, write_atomic
from .plots import RECORD_KEYS, plot_history


class RunDirectory:
    """The folder of one run (created if missing); see the module docs for its layout."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    @property
    def checkpoints(self) -> Path:
        """The folder of checkpoints."""
        return self.path / "checkpoints"

    def write_config(self, config: Config | dict[str, Any]) -> None:
        """Save the run's settings as config.json."""
        if isinstance(config, Config):
            config.save(self.path / "config.json")
        elif isinstance(config, dict):
            write_json(self.path / "config.json", config)
        else:
            raise TypeError(f"config must be an ember Config or a dict, got {type(config).__name__}")

    def write_metrics(self, history: Sequence[dict[str, Any]]) -> None:
        """Rewrite metrics.jsonl and metrics.csv from the run's history records."""
        lines = "".join(json.dumps(record) + "\n" for record in history)
        write_atomic(self.path / "metrics.jsonl", lines.encode())
        names = list(dict.fromkeys(k for record in history for k in record if k not in RECORD_KEYS))
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=[*RECORD_KEYS, *names], lineterminator="\n")
        writer.writeheader()
        for record in history:
            writer.writerow({k: ("" if v is None else v) for k, v in record.items()})
        write_atomic(self.path / "metrics.csv", out.getvalue().encode())

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Write summary.json."""
        write_json(self.path / "summary.json", summary)

    def write_plots(self, history: Sequence[dict[str, Any]],
                    names: Sequence[str] | None = None) -> tuple[list[str], str | None]:
        """(PNG paths, None) of the curves of `names` (default: all), or ([], why) without matplotlib."""
        try:
            return plot_history(history, self.path / "plots", names), None
        except ImportError as e:
            return [], str(e)


def write_json(path: str | os.PathLike, data: Any) -> None:
    """Write `data` as indented JSON, atomically.

    Example:
        >>> write_json("summary.json", {"best_epoch": 3})
    """
    write_atomic(path, (json.dumps(data, indent=2) + "\n").encode())
