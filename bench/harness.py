"""Timing, results and the machine description shared by every benchmark."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import json
import os
import platform
import re
import statistics
import subprocess
import time
from collections import defaultdict
from typing import Callable

MAX_WARMUP = 5  # untimed calls at most after the first
VERSIONED = ("numpy", "torch", "tinygrad", "ember")  # the packages whose versions `machine` records


@dataclasses.dataclass
class Row:
    """One implementation of one benchmark case: its median time, or None with a note saying why it was skipped."""

    bench: str
    case: str
    impl: str
    median_us: float | None
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Settings:
    """How hard to measure.

    Args:
        repeats: timed repeats per implementation (the median is reported); 1 means a single timed call.
        warmup: untimed calls first, until calls stop getting much faster, so compilation, caches and
            allocators are settled; False: a single timed call and nothing else (smoke tests).
        budget_s: an implementation slower than this per repeat gets fewer repeats (at least one), so
            one slow peer cannot dominate the suite's run time.
        min_repeat_s: a fast call is looped until one repeat lasts this long, so the timer's resolution
            and per-repeat noise do not dominate.
        tiny: smoke-test sizes: proves every case runs; the figures mean nothing.
        large: also run the large cases (matmul at 4096).
    """

    repeats: int = 5
    warmup: bool = True
    budget_s: float = 1.0
    min_repeat_s: float = 0.02
    tiny: bool = False
    large: bool = False

    def size(self, full, tiny):
        """`full` normally, `tiny` in a smoke test."""
        return tiny if self.tiny else full


def _repeat_us(fn: Callable[[], object], inner: int) -> float:
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - start) / inner * 1e6


@dataclasses.dataclass(frozen=True)
class _Plan:
    inner: int  # calls per timed repeat
    repeats: int  # timed repeats (0: `once_us` is the measurement)
    once_us: float  # the last warm-up call


def _plan(fn: Callable[[], object], settings: Settings) -> _Plan:
    """Warm `fn` up and size its repeats.

    Warm-up goes on while calls keep getting much faster (a lazy framework may compile for several calls,
    e.g. an optimizer's first steps create its state). The last warm-up call sizes the loop: fast calls
    are repeated `inner` times per repeat, slow ones get fewer repeats within `settings.budget_s`, and
    one slower than the budget is measured by that call alone.
    """
    once = _seconds(fn)
    if not settings.warmup:
        return _Plan(1, 0, once * 1e6)
    for _ in range(MAX_WARMUP):
        previous, once = once, _seconds(fn)
        if once > previous / 2:
            break
    if settings.repeats <= 1 or once >= settings.budget_s:
        return _Plan(1, 0, once * 1e6)
    inner = max(1, min(10_000, round(settings.min_repeat_s / max(once, 1e-9))))
    return _Plan(inner, max(1, min(settings.repeats, int(settings.budget_s / (once * inner)))), once * 1e6)


def time_together(fns: dict[str, Callable[[], object]], settings: Settings) -> dict[str, tuple[float, int]]:
    """The median time of one call of each implementation of a case in microseconds, and how many repeats
    it is the median of (`_plan` sizes them), their timed repeats taken in turn (one repeat of each, then
    the next round): a slow spell of a shared machine falls on all of them alike, where timing
    one after the other let a spell decide the ratio (two vCPUs: ember/torch on one training step read
    0.7x-1.4x from run to run). Each is warmed up first, all before the first timed round.

    Example:
        >>> time_together({"a": lambda: None, "b": lambda: None}, Settings())["a"][1]
        5
    """
    plans = {name: _plan(fn, settings) for name, fn in fns.items()}
    times: dict[str, list[float]] = {name: [] for name in fns}
    for round_ in range(max((plan.repeats for plan in plans.values()), default=0)):
        for name, fn in fns.items():
            if round_ < plans[name].repeats:
                times[name].append(_repeat_us(fn, plans[name].inner))
    return {name: (statistics.median(times[name]), len(times[name])) if times[name] else (plans[name].once_us, 1)
            for name in fns}


def _seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def peer(name: str):
    """Import a peer library, or return None (the benchmark then notes it as skipped)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def machine() -> dict:
    """What the figures were measured on."""
    from ember.cube.runtime.autotune import cpu_model
    cpu = cpu_model()
    versions = {}
    for name in VERSIONED:
        try:  # the installed distribution's version: tinygrad has no __version__
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            module = peer(name)
            versions[name] = getattr(module, "__version__", "unknown") if module else "absent"
    # Other work on the machine slows every implementation, unevenly: the load average says how busy it was.
    load = [round(x, 1) for x in os.getloadavg()] if hasattr(os, "getloadavg") else "unknown"
    # OMP_NUM_THREADS sets both ember's OpenMP threads and torch's (which reads it when it starts)
    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    return {"cpu": cpu, "cores": os.cpu_count(), "load": load, "omp_num_threads": threads,
            "python": platform.python_version(), **versions,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def source_commit() -> str:
    """The commit of the checkout this bench package runs from (`git rev-parse HEAD`), or "unknown" when it is
    not a git checkout of its own (a copy made by `git archive`, even one inside another checkout)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""
    try:
        own = os.path.realpath(git("rev-parse", "--show-toplevel") or "/nonexistent") == os.path.realpath(root)
        return git("rev-parse", "HEAD") if own else "unknown"
    except OSError:  # no git
        return "unknown"


def write_json(path: str, rows: list[Row], run: dict | None = None) -> None:
    """Save rows (atomically) with the machine description, and the run: ember's commit (`source_commit`)
    and what the caller passes, e.g. the device, the peers, the settings and the command line. Files in
    bench/results/ are the input of `python -m bench --report` (bench/report.py)."""
    from ember.atomic import write_atomic
    payload = {"machine": machine(), "run": {"commit": source_commit(), **(run or {})},
               "rows": [dataclasses.asdict(r) for r in rows]}
    write_atomic(path, json.dumps(payload, indent=2).encode())


def framework_of(impl: str) -> str:
    """The framework an implementation label names: its leading word ("torch.load" -> "torch",
    "ember+autodiff" -> "ember")."""
    return re.match(r"[A-Za-z_]*", impl).group()


def is_ember(impl: str) -> bool:
    """Rows of ember itself (`ember`, `ember+autodiff`, `ember native`, ...); every other row is a peer's."""
    return framework_of(impl) == "ember"


def ratios(row: Row, case_rows: list[Row]) -> str:
    """`row`'s time over each measured peer row of its case, e.g. "ember/torch 1.8x" (>1: ember slower)."""
    if row.median_us is None or not is_ember(row.impl):
        return ""
    return ", ".join(f"{row.impl}/{p.impl} {row.median_us / p.median_us:.3g}x" for p in case_rows
                     if not is_ember(p.impl) and p.median_us)


def markdown(rows: list[Row]) -> str:
    """A table of medians; each ember row shows its ratio to every peer measured in the same case."""
    by_case: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in rows:
        by_case[(r.bench, r.case)].append(r)
    lines = ["| bench | case | impl | median (us) | ember vs peers (>1: ember slower) | note |",
             "|---|---|---|---:|---|---|"]
    for r in rows:
        median = "-" if r.median_us is None else f"{r.median_us:.2f}"
        lines.append(f"| {r.bench} | {r.case} | {r.impl} | {median} | {ratios(r, by_case[(r.bench, r.case)])} "
                     f"| {r.note} |")
    return "\n".join(lines)
