"""Autotune: pick the fastest of several implementations of one op, per device and shape class.

An `Autotuner` has named candidates (cube kernels, vendor libraries) and a key function. On the first
call with a new key it times the candidates, keeps the winner in a persistent per-device cache
(`[autotune] cache_dir`/<device>.json, written atomically; a corrupt file is set aside and rebuilt),
and calls it; later calls, in this process or the next, go straight to the winner.

Keys anchor sizes to powers of two (`anchor(1000) == 1024`) so that nearby shapes share a decision.
Levels (`[autotune] level`): `minimal` never times (the first candidate wins), `balanced` times each
candidate briefly, `extensive` and `full` time longer (full also keeps candidates marked slow).

Example:
    >>> tuner = Autotuner("matmul", {"blas": blas_matmul, "tiled": cube_matmul},
    ...                   key=lambda a, b: (anchor(a.shape[0]), anchor(b.shape[1]), str(a.dtype)))
    >>> out = tuner(a, b)
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

REPEATS = {"minimal": 0, "balanced": 3, "extensive": 10, "full": 10}


def anchor(n: int) -> int:
    """The power of two at or above `n` (0 stays 0)."""
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


class AutotuneCache:
    """Winners by (op, key), persisted per device as JSON."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path).expanduser()
        self._lock = threading.Lock()
        self._entries: dict[str, str] = self._read()

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text())
            if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
                raise ValueError("not a map of names")
            return data
        except FileNotFoundError:
            return {}
        except (ValueError, OSError):
            # A damaged cache only costs re-timing: keep it aside for inspection and start afresh.
            os.replace(self.path, self.path.with_suffix(".corrupt"))
            return {}

    def get(self, op: str, key: tuple) -> str | None:
        return self._entries.get(f"{op}:{key!r}")

    def put(self, op: str, key: tuple, winner: str) -> None:
        from ...atomic import write_atomic
        with self._lock:
            self._entries[f"{op}:{key!r}"] = winner
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, json.dumps(self._entries, indent=1, sort_keys=True).encode())


class Autotuner:
    """The fastest of `candidates` per key (see the module docs)."""

    def __init__(self, op: str, candidates: dict[str, Callable[..., Any]], key: Callable[..., tuple],
                 cache: AutotuneCache | None = None, level: str | None = None,
                 slow: tuple[str, ...] = (), sync: Callable[[], None] = lambda: None) -> None:
        if not candidates:
            raise ValueError(f"autotuner {op!r} needs at least one candidate")
        self.op = op
        self.candidates = candidates
        self.key = key
        self.cache = cache
        self.level = level
        self.slow = slow
        self.sync = sync
        self._memory: dict[tuple, str] = {}

    def _level(self) -> str:
        if self.level is not None:
            return self.level
        from ...settings import settings
        return settings().get("autotune", "level")

    def choose(self, *args, **kwargs) -> str:
        """The winning candidate's name for these arguments (timing them on first sight)."""
        key = self.key(*args, **kwargs)
        name = self._memory.get(key) or (self.cache.get(self.op, key) if self.cache else None)
        if name not in self.candidates:
            name = self._tune(key, args, kwargs)
        self._memory[key] = name
        return name

    def __call__(self, *args, **kwargs):
        return self.candidates[self.choose(*args, **kwargs)](*args, **kwargs)

    def _tune(self, key: tuple, args, kwargs) -> str:
        level = self._level()
        names = [n for n in self.candidates if level == "full" or n not in self.slow]
        repeats = REPEATS[level]
        if repeats == 0 or len(names) == 1:
            return names[0]
        timings = {}
        for name in names:
            fn = self.candidates[name]
            fn(*args, **kwargs)  # warm up: compilation and caches are not what we compare
            self.sync()
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                fn(*args, **kwargs)
                self.sync()
                best = min(best, time.perf_counter() - start)
            timings[name] = best
        winner = min(timings, key=timings.get)
        if self.cache is not None:
            self.cache.put(self.op, key, winner)
        return winner
