"""`python -m bench.mnist_job [--device cpu] [mnist options]`: the README's main job, with its wall time
split by phase and the garbage collector's pauses, to see what costs time around the training step.

It runs `ember.examples.mnist.main` once in this process with timers wrapped around the Learner's
phases (import, set-up, data loading, step, host reads of the step's results, metrics and display,
validation, checkpoints and files, plots) and a `gc.callbacks` hook that sums the collector's pauses
per generation. The phases nest (a validation pass includes its data loading), so the lines do not add
up to the total; "train epochs" minus its parts is the loop's own overhead. The timers cost a few
microseconds per call: compare runs of this script with each other, and the plain job with `time`.

Example:
    python -m bench.mnist_job --device cpu --display plain --epochs 2 --out /tmp/mnist-bench
"""

from __future__ import annotations

import collections
import gc
import sys
import time
from typing import Any, Callable

_STARTED = time.perf_counter()

import ember  # noqa: E402  (the import is a phase of the job: timed from _STARTED)
import ember.examples.mnist as mnist  # noqa: E402
from ember.data import loader as data_loader  # noqa: E402
from ember.train import learner, run_dir  # noqa: E402

# label -> (object, attribute): the functions timed; each label sums the wall time of every call.
PHASES = {
    "set-up: loaders": (mnist, "loaders"),
    "set-up: learner": (learner.Learner, "__init__"),
    "train epochs": (learner.Learner, "_train_epoch"),
    "  data: next batch (validation's too)": (data_loader.LoaderIterator, "__next__"),
    "  to device": (learner, "move_to"),
    "  forward and loss (validation's too)": (learner.Learner, "train_step"),
    "  backward": (ember.Tensor, "backward"),
    "  optimizer and schedule": (learner.Learner, "_optimizer_step"),
    "  after step: host reads, metrics, display": (learner.Learner, "_after_step"),
    "  host reads of step results (validation's too)": (learner, "observe"),
    "validation (each epoch and the final evaluate)": (learner.Learner, "_validate"),
    "checkpoints": (learner.Learner, "_save"),
    "metric files and summary": (run_dir.RunDirectory, "write_metrics"),
    "plots": (run_dir.RunDirectory, "write_plots"),
}


def timed(totals: dict, counts: collections.Counter, label: str, fn: Callable) -> Callable:
    """`fn` that adds its wall time to `totals[label]` and counts its calls.

    Example:
        >>> f = timed(totals, counts, "sleep", time.sleep)
    """
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[label] += time.perf_counter() - start
            counts[label] += 1
    return wrapper


class GcPauses:
    """Sums the garbage collector's pauses per generation while installed (`gc.callbacks`).

    Example:
        >>> with GcPauses() as pauses: ...
        >>> pauses.report()
    """

    def __init__(self) -> None:
        self.seconds: dict[int, float] = collections.defaultdict(float)
        self.count: collections.Counter = collections.Counter()
        self.longest = 0.0
        self._start = 0.0

    def _hook(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
            return
        pause = time.perf_counter() - self._start
        self.seconds[info["generation"]] += pause
        self.count[info["generation"]] += 1
        self.longest = max(self.longest, pause)

    def __enter__(self) -> "GcPauses":
        gc.callbacks.append(self._hook)
        return self

    def __exit__(self, *exc: Any) -> None:
        gc.callbacks.remove(self._hook)

    def report(self) -> str:
        parts = [f"gen{g} {self.count[g]} x, {self.seconds[g] * 1e3:.0f} ms" for g in sorted(self.seconds)]
        total = sum(self.seconds.values())
        return f"gc pauses: {total * 1e3:.0f} ms ({'; '.join(parts)}; longest {self.longest * 1e3:.1f} ms)"


def main(argv: list[str]) -> None:
    imported = time.perf_counter() - _STARTED
    totals: dict[str, float] = collections.defaultdict(float)
    counts: collections.Counter = collections.Counter()
    for label, (owner, name) in PHASES.items():
        setattr(owner, name, timed(totals, counts, label, getattr(owner, name)))
    started = time.perf_counter()
    with GcPauses() as pauses:
        mnist.main(argv)
    job = time.perf_counter() - started
    print(f"import {imported:.2f} s, job {job:.2f} s, total {time.perf_counter() - _STARTED:.2f} s")
    for label in PHASES:
        if counts[label]:
            print(f"  {label:50s} {totals[label]:7.3f} s  ({counts[label]} calls)")
    print(pauses.report())


if __name__ == "__main__":
    main(sys.argv[1:])
