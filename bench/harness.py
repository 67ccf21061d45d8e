"""Timing, results and the machine description shared by every benchmark."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import platform
import statistics
import time
from typing import Callable


@dataclasses.dataclass
class Row:
    """One measured implementation of one benchmark case."""

    bench: str
    case: str
    impl: str
    median_us: float
    note: str = ""


def median_us(fn: Callable[[], object], inner: int, repeats: int = 7, warmup: int = 1) -> float:
    """Median over `repeats` of the mean time of `inner` calls of `fn`, in microseconds."""
    for _ in range(warmup):
        for _ in range(inner):
            fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - start) / inner * 1e6)
    return statistics.median(times)


def peer(name: str):
    """Import a peer library, or return None (the benchmark then notes it as skipped)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def machine() -> dict:
    """What the figures were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    versions = {}
    for name in ("numpy", "torch", "tinygrad", "ember"):
        module = peer(name)
        versions[name] = getattr(module, "__version__", "absent") if module else "absent"
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), **versions,
            "date": time.strftime("%Y-%m-%d")}


def write_json(path: str, rows: list[Row]) -> None:
    """Save rows with the machine description (atomically)."""
    from ember.atomic import write_atomic
    payload = {"machine": machine(), "rows": [dataclasses.asdict(r) for r in rows]}
    write_atomic(path, json.dumps(payload, indent=2).encode())


def markdown(rows: list[Row], baseline: str) -> str:
    """A table of medians with the ratio of each implementation to `baseline` (>1: slower than it)."""
    lines = ["| bench | case | impl | median (us) | vs " + baseline + " |", "|---|---|---|---:|---:|"]
    base = {(r.bench, r.case): r.median_us for r in rows if r.impl == baseline}
    for r in rows:
        ref = base.get((r.bench, r.case))
        ratio = f"{r.median_us / ref:.2f}x" if ref else ""
        lines.append(f"| {r.bench} | {r.case} | {r.impl} | {r.median_us:.2f} | {ratio} |"
                     + (f" {r.note}" if r.note else ""))
    return "\n".join(lines)
