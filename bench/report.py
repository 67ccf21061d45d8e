"""`python -m bench --report`: bench/RESULTS.md, the current figures, from the results folder.

The folder (bench/results/) holds one JSON file per run of one machine and device, as
`harness.write_json` writes it (`python -m bench ... --json`, `python -m bench.gpu --results`):
`{"machine": {...}, "run": {...}, "rows": [{"bench", "case", "impl", "median_us", "note"}, ...]}`, and
`notes.md`, the hand-written part of the report (how each peer is configured, how the figures were
taken). The report is a fixed header, the notes, then one table per results file in name order: a row
per ember implementation of each case, in the file's order, with its time, each peer's time and
ember's time over the peer's; under it the machine, the versions, the date, the commit, the run's
settings and its command line. The same folder gives the same bytes.

Example:
    >>> write_report("bench/results", "bench/RESULTS.md")
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import NamedTuple

from ember.atomic import write_atomic
from ember.errors import EmberError

from .harness import VERSIONED, Row, framework_of, is_ember

NOTES = "notes.md"
# Peer columns first in this order, the others after them by name; a peer's column is its framework
# (`framework_of`: "torch.load" is torch's), except these configurations, which get their own.
COLUMNS = ("numpy", "torch", "torch.compile", "tinygrad")
OWN_COLUMN = ("torch.compile",)

HEADER = """# Benchmark results

The current figures of ember's benchmarks against its peers, measured in the same run: one table per
results file in `bench/results/` (one run of one machine and device). This file is generated from those
files and `bench/results/notes.md` by `python -m bench --report`; edit those, not this. To refresh a
table, rerun the command under it (it writes the results file), then regenerate:

    python -m bench --report

Times are medians per call. Each row is one ember implementation of a case; `ember/<peer>` is ember's
time over the peer's: below 1, ember is faster. A peer column holds every implementation of that
framework in the case, named where it is not the framework itself (`torch.load`). The figures of
earlier stops, when this file was a journal, are in its git history: `git log -p bench/RESULTS.md`.
"""

NO_GPU = """## GPU

No GPU results in `bench/results/` yet. `scripts/gpu_check.sh`'s bench step writes `bench-cuda.json`
into its results folder (`python -m bench.gpu ... --results`); copy it here named after the machine
(`h200-cuda.json`) and regenerate.
"""


class ReportError(EmberError, ValueError):
    """The results folder cannot make a report: no results, no notes, or a file that is not a results file."""


class Results(NamedTuple):
    """One results file: its name, the machine and run descriptions, its rows in the file's order."""

    name: str
    machine: dict
    run: dict
    rows: list[Row]


def write_report(results: str | Path, out: str | Path) -> None:
    """Write `report(results)` to `out` atomically."""
    write_atomic(out, report(results).encode())


def report(results: str | Path) -> str:
    """The markdown report of the results folder `results` (see the module's docstring).

    Raises:
        ReportError: `results` has no `*.json` file or no `notes.md`, or a file is not a results file.
    """
    folder = Path(results)
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not files:
        raise ReportError(f"no results to report: {folder} holds no *.json results file; write one with "
                          f"`python -m bench ... --json {folder}/cpu.json`")
    notes = folder / NOTES
    if not notes.is_file():
        raise ReportError(f"{notes} is missing: it holds the hand-written part of the report (how each peer "
                          f"is configured, how the figures were taken)")
    loaded = [load(path) for path in files]
    parts = [HEADER, notes.read_text().strip() + "\n", *(table(r) for r in loaded)]
    if not any("cuda" in str(r.run.get("device", "")).lower() for r in loaded):
        parts.append(NO_GPU)
    return "\n".join(parts)


def load(path: Path) -> Results:
    """Read one results file, checking that it holds what `harness.write_json` writes."""
    def bad(what: str) -> ReportError:
        return ReportError(f"{path} is not a results file of `python -m bench --json`: {what}")
    try:
        payload = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad(f"cannot read it as JSON ({e})") from e
    if not isinstance(payload, dict) or not all(isinstance(payload.get(k), t) for k, t in
                                                (("machine", dict), ("run", dict), ("rows", list))):
        raise bad('it should hold an object with "machine" and "run" objects and a "rows" list')
    rows = []
    for i, row in enumerate(payload["rows"]):
        try:
            rows.append(Row(row["bench"], row["case"], row["impl"],
                            None if row["median_us"] is None else float(row["median_us"]), row.get("note", "")))
        except (KeyError, TypeError, ValueError) as e:
            raise bad(f'row {i} should have "bench", "case", "impl" and a number or null "median_us" '
                      f"({type(e).__name__}: {e})") from e
    return Results(path.name, payload["machine"], payload["run"], rows)


def column(impl: str) -> str:
    """The peer column an implementation's time goes to: "torch.load" -> "torch", "torch.compile" -> itself."""
    return impl if impl in OWN_COLUMN else framework_of(impl)


def table(results: Results) -> str:
    """The section of one results file: its table, then what was measured on what, and how."""
    cases: dict[tuple[str, str], list[Row]] = {}
    for r in results.rows:
        cases.setdefault((r.bench, r.case), []).append(r)
    peers = [r for r in results.rows if not is_ember(r.impl)]
    measured = {column(r.impl) for r in peers if r.median_us is not None}
    columns = [c for c in COLUMNS if c in measured] + sorted(measured - set(COLUMNS))
    head = ["bench", "case", "ember impl", "ember", *columns, *(f"ember/{c}" for c in columns), "notes"]
    lines = [f"## {results.name}: {results.run.get('device', 'unknown device')}", "",
             "| " + " | ".join(head) + " |", "|---|---|---|" + "---:|" * (1 + 2 * len(columns)) + "---|"]
    for rows in cases.values():
        embers = [r for r in rows if is_ember(r.impl)] or [None]
        for ember in embers:
            lines.append("| " + " | ".join(_cells(ember, rows, columns)) + " |")
    return "\n".join(lines + [""] + _described(results, peers, measured)) + "\n"


def _cells(ember: Row | None, rows: list[Row], columns: list[str]) -> list[str]:
    """A table row: bench, case, ember's label and time, each column's peer times, then ember's ratio to
    each, then the notes (ember's, then each peer's by label)."""
    first = rows[0]
    peers = {c: [p for p in rows if not is_ember(p.impl) and column(p.impl) == c] for c in columns}

    def named(p: Row, text: str) -> str:
        return text if p.impl == column(p.impl) else f"{p.impl} {text}"
    times = ["; ".join(named(p, _time(p.median_us)) for p in peers[c]) for c in columns]
    ours = ember.median_us if ember else None
    ratio = ["; ".join(named(p, _number(ours / p.median_us)) for p in peers[c] if p.median_us)
             if ours is not None else "" for c in columns]
    notes = ([ember.note] if ember and ember.note else []) + \
        [f"{p.impl}: {p.note}" for p in rows if not is_ember(p.impl) and p.note and column(p.impl) in columns]
    cells = [first.bench, first.case, ember.impl if ember else "-", _time(ours), *times, *ratio, "; ".join(notes)]
    return [c.replace("|", "\\|").replace("\n", " ") for c in cells]


def _described(results: Results, peers: list[Row], measured: set[str]) -> list[str]:
    """The lines under a table: machine, versions, date and commit, the run's settings, its command, and
    the peers that this run asked for but could not measure."""
    machine, run = results.machine, results.run
    lines = [
        "- machine: " + ", ".join(f"{k} {_value(v)}" for k, v in machine.items()
                                  if k not in (*VERSIONED, "python", "date")),
        "- versions: " + ", ".join(f"{k} {_value(machine[k])}" for k in ("python", *VERSIONED) if k in machine),
        f"- date: {_value(machine.get('date', 'unknown'))}; ember commit: {_value(run.get('commit', 'unknown'))}",
        "- run: " + ", ".join(f"{k} {_value(v)}" for k, v in run.items() if k not in ("commit", "command")),
        f"- command: `{_value(run.get('command', 'unknown'))}`",
    ]
    unmeasured = sorted({(column(p.impl), p.note) for p in peers if column(p.impl) not in measured})
    if unmeasured:
        lines.append("- not measured: " + "; ".join(f"{c} ({note or 'no time'})" for c, note in unmeasured))
    return [line.replace("\n", " ") for line in lines]


def _value(v: object) -> str:
    if isinstance(v, list):
        return " ".join(_value(x) for x in v) or "none"
    return str(v)


def _number(x: float) -> str:
    """Three significant digits, never an exponent: 0.00412, 0.85, 12.3, 1234."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    return f"{x:.{max(0, 2 - math.floor(math.log10(abs(x))))}f}"


def _time(us: float | None) -> str:
    """A median in microseconds in the unit that keeps it between 1 and 1000: "12.3 us", "4.56 ms", "1.20 s"."""
    if us is None:
        return "-"
    for unit, scale in (("us", 1.0), ("ms", 1e3)):
        if us < 1e3 * scale:
            return f"{_number(us / scale)} {unit}"
    return f"{_number(us / 1e6)} s"
