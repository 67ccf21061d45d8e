"""System monitors: learning rate, items per second, CPU use, process memory and device memory.

They are `Metric`s with `higher_is_better = None` (they never pick a best epoch). Rates are exact over
their window: items per second is `sum(items) / sum(seconds)`, CPU use `100 * sum(cpu) / sum(wall)`.
Memory values are gauges in MiB: the running value is the latest reading, the epoch value the peak.

Process memory is the resident set size from `psutil` when installed, else `/proc/self/statm` (Linux),
else the peak RSS from `resource.getrusage`. Device memory asks the device's backend for
`memory_stats()` and reads its `in_use` bytes (the `MemoryStats` of `ember.cube.runtime.memory_pool`, or a
dict with that key); backends without a memory pool, such as NumPy's, report n/a.

Example:
    >>> m = ItemsPerSecond()
    >>> m.compute(m.observe(Observation(0.0, items=64, seconds=0.5)))
    128.0
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np

from .metrics import Metric, Observation

_MIB = 1024.0 * 1024.0


class LearningRate(Metric):
    """The optimizer's learning rate at each step (running: latest; epoch: the epoch's last).

    Example:
        >>> LearningRate().compute(np.array([1e-3]))
        0.001
    """

    name = "lr"
    higher_is_better = None
    splits = ("train",)

    def observe(self, obs: Observation) -> np.ndarray | None:
        return None if obs.lr is None else np.array([obs.lr], dtype=np.float64)

    def merge(self, a: Any, b: Any) -> Any:
        return a if b is None else b

    def compute(self, state: np.ndarray | None) -> float | None:
        return None if state is None else float(state[0])

    def format(self, value: float | None) -> str:
        return "n/a" if value is None else f"{value:.2e}"


class ItemsPerSecond(Metric):
    """Items processed per second of wall time, data loading included.

    Example:
        >>> ItemsPerSecond().compute(np.array([100.0, 2.0]))
        50.0
    """

    name = "items_per_sec"
    higher_is_better = None

    def observe(self, obs: Observation) -> np.ndarray:
        return np.array([obs.items, obs.seconds], dtype=np.float64)

    def compute(self, state: np.ndarray) -> float | None:
        return float(state[0] / state[1]) if state[1] > 0 else None

    def format(self, value: float | None) -> str:
        return "n/a" if value is None else f"{value:,.0f}"


class CpuUsage(Metric):
    """CPU time of this process as a percentage of wall time (100 = one core busy; more with threads).

    Example:
        >>> CpuUsage().compute(np.array([1.5, 1.0]))
        150.0
    """

    name = "cpu_percent"
    higher_is_better = None

    def observe(self, obs: Observation) -> np.ndarray:
        return np.array([obs.cpu_seconds, obs.seconds], dtype=np.float64)

    def compute(self, state: np.ndarray) -> float | None:
        return float(100.0 * state[0] / state[1]) if state[1] > 0 else None

    def format(self, value: float | None) -> str:
        return "n/a" if value is None else f"{value:.0f}%"


class _Gauge(Metric):
    """A reading in MiB: running is the latest, epoch the peak."""

    higher_is_better = None

    def merge(self, a: Any, b: Any) -> Any:
        if a is None or b is None:
            return a if b is None else b
        return np.maximum(a, b)

    def compute(self, state: np.ndarray | None) -> float | None:
        return None if state is None else float(state[0])

    def format(self, value: float | None) -> str:
        return "n/a" if value is None else f"{value:,.1f} MiB"


class MemoryUsage(_Gauge):
    """Resident memory of this process in MiB (see the module docs for the source).

    Example:
        >>> float(MemoryUsage().observe(Observation(0.0))[0]) > 0
        True
    """

    name = "memory_mib"

    def observe(self, obs: Observation) -> np.ndarray | None:
        rss = resident_bytes()
        return None if rss is None else np.array([rss / _MIB])


class DeviceMemory(_Gauge):
    """Memory in use on the batch's device in MiB, from `backend.memory_stats().in_use`; n/a when the
    backend keeps no pool (the NumPy backend).

    Example:
        >>> DeviceMemory().observe(Observation(0.0, device=ember.Device.numpy())) is None
        True
    """

    name = "device_memory_mib"

    def observe(self, obs: Observation) -> np.ndarray | None:
        stats = getattr(getattr(obs.device, "backend", None), "memory_stats", None)
        if stats is None:
            return None
        found = stats()
        in_use = found.get("in_use") if isinstance(found, dict) else getattr(found, "in_use", None)
        return None if in_use is None else np.array([in_use / _MIB])


def resident_bytes() -> int | None:
    """This process's resident set size in bytes (psutil, /proc, or the peak from getrusage).

    Example:
        >>> resident_bytes() > 0
        True
    """
    process = _this_process(os.getpid())
    if process is not None:
        return int(process.memory_info().rss)
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
        import sys
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)  # macOS reports bytes, Linux KiB
    except (ImportError, OSError):
        return None


@functools.lru_cache(maxsize=1)
def _this_process(pid: int) -> Any:
    """psutil's handle on process `pid`, or None without psutil; looked up once (the monitor reads it
    every batch, and a failed `import psutil` or a new handle costs more than the read); keyed by pid
    so a forked child gets its own."""
    try:
        import psutil
    except ImportError:
        return None
    return psutil.Process(pid)
