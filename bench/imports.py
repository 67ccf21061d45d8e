"""Import time: `import ember` against `import numpy` and `import torch`, each in a fresh interpreter.

The figure is the cumulative time `python -X importtime -c "import X"` reports for the top-level
package (what the import itself costs, without the interpreter's start), the median over the
repeats, taken in turn (one import of each framework, then the next round) so a busy spell of a shared
machine falls on all alike. ember is imported from this checkout. Each row notes the whole command's
wall time, interpreter start included.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .frameworks import Frameworks
from .harness import Row, Settings

ROOT = Path(__file__).resolve().parent.parent  # `import ember` there finds this checkout's ember
CASE = "import X, fresh interpreter (-X importtime)"


def import_us(package: str) -> tuple[float, float]:
    """(the cumulative import time of `package` in microseconds as `-X importtime` reports it, the
    command's wall time in microseconds), from one fresh interpreter.

    Example:
        >>> import_us("json")[0] > 0
        True
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPROFILEIMPORTTIME"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {package}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    wall = (time.perf_counter() - start) * 1e6
    if done.returncode != 0:
        raise RuntimeError(f"import {package} failed: {done.stderr.strip().splitlines()[-1:]}")
    for line in done.stderr.splitlines():
        fields = line.removeprefix("import time:").split("|")
        if len(fields) == 3 and fields[2].rstrip() == f" {package}":
            return float(fields[1]), wall
    raise RuntimeError(f"-X importtime printed no line for the top-level package {package}")


def imports(fw: Frameworks, settings: Settings) -> list[Row]:
    names = ["ember", *(name for name in fw.modules if name != "ember")]
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for _ in range(settings.repeats):
        for name in names:
            times[name].append(import_us(name))
    rows = []
    for name in names:
        us = statistics.median(t for t, _ in times[name])
        wall_ms = statistics.median(w for _, w in times[name]) / 1e3
        rows.append(Row("import", CASE, name, us, f"{wall_ms:.0f} ms wall with the interpreter's start"))
    rows += [Row("import", CASE, name, None, f"skipped: {why}") for name, why in fw.missing.items()]
    return rows


BENCHMARKS = {"import": imports}
