"""Autotune: pick the fastest of several implementations of one op, per device and shape class.

An `Autotuner` has named candidates (cube kernel variants, vendor libraries) and a key function. On
the first call with a new key it times the candidates, keeps the winner in a persistent per-device
cache (`device_cache`: `[autotune] cache_dir`/<device>.json, written atomically; a corrupt file is set
aside with a warning and rebuilt), and calls it; later calls, in this process or the next, go
straight to the winner without timing.

Keys anchor sizes to powers of two (`anchor(1000) == 1024`) so that nearby shapes share a decision.
Levels (`[autotune] level`, `EMBER_AUTOTUNE`), from cheapest to most thorough:

- `minimal`: never times; the first candidate (the op's sensible default) always runs;
- `balanced`: times the candidates of tier `balanced` (the default tier), 3 runs each;
- `extensive`: also the candidates of tier `extensive`, 5 runs each;
- `full`: every candidate, 10 runs each.

A candidate's tier is given by `tiers={name: level}`; unnamed candidates are `balanced`. Calls for
which `worth(*args)` is False (problems too small for timing to pay off) take the first candidate.
The candidates' runs are taken in turn (one of each, then the next round) and each keeps its fastest, so
a slow spell of a shared machine falls on all of them; `margin` keeps the default unless another is
that much faster (0.1: takes under 90% of its time), so noise does not pick a worse one for good.

Example:
    >>> tuner = Autotuner("matmul", {"blas": np.matmul, "cube": cube_matmul},
    ...                   key=lambda a, b: (anchor(a.shape[0]), anchor(b.shape[1]), str(a.dtype)),
    ...                   cache=device_cache("cpu"))
    >>> out = tuner(a, b)
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import threading
import time
import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, ContextManager

LEVELS = ("minimal", "balanced", "extensive", "full")
REPEATS = {"minimal": 0, "balanced": 3, "extensive": 5, "full": 10}

# timer(name, run) -> seconds of one call of `run` (the candidate `name` on the tuned arguments).
Timer = Callable[[str, Callable[[], Any]], float]


def anchor(n: int) -> int:
    """The power of two at or above `n` (0 stays 0).

    Example:
        >>> anchor(1000), anchor(1024), anchor(1025)
        (1024, 1024, 2048)
    """
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


class AutotuneCache:
    """Winners by (op, key), persisted as JSON in one file per device.

    A file that does not parse as a map of names (not JSON, not UTF-8, nested too deep to parse, a
    value that is not a name) is renamed to `<name>.corrupt` with a `RuntimeWarning`, and the cache starts empty (the decisions are timed again). A cache that cannot
    be written (read-only folder) warns and keeps its decisions in memory.

    Example:
        >>> cache = AutotuneCache("/tmp/autotune/cpu.json")
        >>> cache.put("matmul", (1024, "f32"), "blas"); cache.get("matmul", (1024, "f32"))
        'blas'
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path).expanduser()
        self._lock = threading.Lock()
        self._entries: dict[str, str] = self._read()

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text())
            if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
                raise ValueError("not a JSON map of op keys to candidate names")
            return data
        except (FileNotFoundError, NotADirectoryError):
            return {}
        except (ValueError, RecursionError, OSError) as e:  # UnicodeDecodeError is a ValueError
            aside = self.path.with_suffix(".corrupt")
            warnings.warn(f"autotune cache {self.path} is unreadable ({e}); set aside as {aside.name} and "
                          f"rebuilt (decisions are timed again)", RuntimeWarning, stacklevel=3)
            try:
                os.replace(self.path, aside)
            except OSError:
                pass
            return {}

    def get(self, op: str, key: tuple) -> str | None:
        """The stored winner of `op` for `key`, or None."""
        return self._entries.get(_entry(op, key))

    def put(self, op: str, key: tuple, winner: str) -> None:
        """Store `winner` for (`op`, `key`) and rewrite the file atomically."""
        from ...atomic import write_atomic
        with self._lock:
            self._entries[_entry(op, key)] = winner
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(self.path, json.dumps(self._entries, indent=1, sort_keys=True).encode())
            except OSError as e:
                warnings.warn(f"autotune cache {self.path} cannot be written ({e}); decisions last for this "
                              f"process only", RuntimeWarning, stacklevel=3)


def _entry(op: str, key: tuple) -> str:
    return f"{op}:{key!r}"


_caches: dict[Path, AutotuneCache] = {}
_caches_lock = threading.Lock()


def cpu_model() -> str:
    """This CPU's model name (`/proc/cpuinfo`), else what `platform` knows.

    Example:
        >>> cpu_model()
        'AMD EPYC'
    """
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def device_fingerprint() -> str:
    """A short name for this CPU (model and core count): a cache tuned here is not used elsewhere."""
    return hashlib.sha256(f"{cpu_model()}|{os.cpu_count()}".encode()).hexdigest()[:12]


def device_cache(device: str) -> AutotuneCache:
    """The persistent cache of `device` ("cpu", "cuda:0", ...) under `[autotune] cache_dir`, one
    object per file in this process; a `ConfigError` when that setting names a file.

    Example:
        >>> device_cache("cpu").path.name      # the device and this machine's fingerprint
        'cpu-3f2a9c1d0b7e.json'
    """
    from ...settings import settings
    name = f"{device.replace(':', '_')}-{device_fingerprint()}.json"
    path = settings().directory("autotune", "cache_dir") / name
    with _caches_lock:
        if path not in _caches:
            _caches[path] = AutotuneCache(path)
        return _caches[path]


class Autotuner:
    """The fastest of `candidates` per key (see the module docs).

    Args:
        op: the op's name in the cache.
        candidates: name -> implementation, all with one signature; the first is the default.
        key: arguments -> a hashable tuple (anchor the sizes).
        cache: where winners persist (None: this object only).
        level: a fixed level (None: `[autotune] level` at each tuning).
        tiers: name -> the lowest level that times the candidate (default `balanced`).
        worth: arguments -> False when the call should take the default without timing.
        sync: waits for queued work (a GPU's), called after each timed run.
        timer: `timer(name, run)` -> seconds of one run (tests inject a fake one).
        aside: a context the candidates are timed in: the CUDA runtime's `unrecorded`, so that a step
            whose launches are being recorded for replay neither records the timing runs nor keeps their
            outputs alive until it ends (a step's score-sized outputs would otherwise raise its peak).
        margin: the fraction of the default's time another candidate must save to win (see the module
            docs); 0: the fastest wins.

    Example:
        >>> tuner = Autotuner("add", {"np": np.add, "ufunc": lambda a, b: a + b}, key=lambda a, b: (anchor(a.size),))
        >>> tuner.choose(np.ones(1000), np.ones(1000)) in ("np", "ufunc")
        True
    """

    def __init__(self, op: str, candidates: dict[str, Callable[..., Any]], key: Callable[..., tuple],
                 cache: AutotuneCache | None = None, level: str | None = None,
                 tiers: dict[str, str] | None = None, worth: Callable[..., bool] | None = None,
                 sync: Callable[[], None] = lambda: None, timer: Timer | None = None,
                 aside: Callable[[], ContextManager[Any]] = nullcontext, margin: float = 0.0) -> None:
        if not candidates:
            raise ValueError(f"autotuner {op!r} needs at least one candidate")
        for where, value in (("level", level), *(((f"tier of {n!r}"), t) for n, t in (tiers or {}).items())):
            if value is not None and value not in LEVELS:
                raise ValueError(f"autotuner {op!r}: {where} {value!r} is not one of {', '.join(LEVELS)}")
        unknown = set(tiers or {}) - set(candidates)
        if unknown:
            raise ValueError(f"autotuner {op!r}: tiers name unknown candidates {sorted(unknown)}")
        if not 0.0 <= margin < 1.0:
            raise ValueError(f"autotuner {op!r}: margin must be in [0, 1), got {margin}")
        self.op = op
        self.candidates = candidates
        self.default = next(iter(candidates))
        self.key = key
        self.cache = cache
        self.level = level
        self.tiers = tiers or {}
        self.worth = worth
        self.sync = sync
        self.timer = timer or self._time_once
        self.aside = aside
        self.margin = margin
        self._memory: dict[tuple, str] = {}

    def _level(self) -> str:
        if self.level is not None:
            return self.level
        from ...settings import settings
        return settings().get("autotune", "level")

    def choose(self, *args, **kwargs) -> str:
        """The winning candidate's name for these arguments (timing them on first sight of their key)."""
        if self.worth is not None and not self.worth(*args, **kwargs):
            return self.default
        level = self._level()
        if level == "minimal":
            return self.default
        key = self.key(*args, **kwargs) + (level,)
        name = self._memory.get(key) or (self.cache.get(self.op, key) if self.cache else None)
        if name not in self.candidates:
            name = self._tune(key, level, args, kwargs)
        self._memory[key] = name
        return name

    def __call__(self, *args, **kwargs):
        return self.candidates[self.choose(*args, **kwargs)](*args, **kwargs)

    def timed(self, level: str) -> list[str]:
        """The candidates that `level` times, in order."""
        rank = LEVELS.index(level)
        return [n for n in self.candidates if LEVELS.index(self.tiers.get(n, "balanced")) <= rank]

    def _tune(self, key: tuple, level: str, args, kwargs) -> str:
        names = self.timed(level)
        if len(names) == 1:
            return names[0]

        def runner(fn):
            def run():
                fn(*args, **kwargs)
                self.sync()
            return run
        runs = {name: runner(self.candidates[name]) for name in names}
        timings = dict.fromkeys(names, float("inf"))
        with self.aside():
            for run in runs.values():
                run()  # warm up: compilation and caches are not what we compare
            for _ in range(REPEATS[level]):  # in turn: a slow spell falls on every candidate
                for name, run in runs.items():
                    timings[name] = min(timings[name], self.timer(name, run))
        winner = min(timings, key=timings.get)
        if self.default in timings and timings[winner] > (1.0 - self.margin) * timings[self.default]:
            winner = self.default
        if self.cache is not None:
            self.cache.put(self.op, key, winner)
        return winner

    @staticmethod
    def _time_once(name: str, run: Callable[[], Any]) -> float:
        start = time.perf_counter()
        run()
        return time.perf_counter() - start
