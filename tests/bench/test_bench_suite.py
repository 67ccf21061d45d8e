"""Smoke test of the benchmark suite: every benchmark runs at tiny sizes with one timed call and gives a
row for ember and for each peer, measured or skipped with a reason. Speed is not checked here."""

from __future__ import annotations

import json

import pytest

from bench.__main__ import BENCHMARKS, main
from bench.frameworks import PEERS, Frameworks
from bench.harness import Row, Settings, framework_of, markdown

TINY = Settings(repeats=1, warmup=False, tiny=True)


@pytest.fixture(scope="module")
def frameworks() -> Frameworks:
    return Frameworks("numpy", PEERS)


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_benchmark_runs_and_reports_every_framework(frameworks: Frameworks, name: str) -> None:
    rows = BENCHMARKS[name](frameworks, TINY)
    assert rows and all(isinstance(r, Row) and r.bench == name for r in rows)
    assert all(r.median_us is None or r.median_us > 0 for r in rows)
    assert all(r.note.startswith("skipped: ") for r in rows if r.median_us is None)
    assert any(r.impl.startswith("ember") and r.median_us is not None for r in rows)
    if name != "checkpointing":  # ember against itself, by design
        for case in {r.case for r in rows}:
            impls = {framework_of(r.impl) for r in rows if r.case == case}
            assert set(PEERS) <= impls, f"{name} / {case}: no row for {set(PEERS) - impls}"


def test_markdown_shows_ember_against_every_measured_peer() -> None:
    rows = [Row("b", "c", "numpy", 2.0), Row("b", "c", "ember", 4.0), Row("b", "c", "torch", 1.0),
            Row("b", "c", "tinygrad", None, "skipped: absent")]
    ember_line = next(line for line in markdown(rows).splitlines() if "| ember |" in line)
    assert "ember/numpy 2x" in ember_line and "ember/torch 4x" in ember_line and "tinygrad" not in ember_line


def test_cli_writes_json(tmp_path, capsys) -> None:
    path = tmp_path / "results.json"
    assert main(["overhead", "--peers", "numpy", "--repeats", "1", "--json", str(path)]) == 0
    payload = json.loads(path.read_text())
    assert {framework_of(r["impl"]) for r in payload["rows"]} == {"numpy", "ember"}
    assert payload["run"]["device"] == 'Device("numpy")' and "cores" in payload["machine"]
    assert "| overhead | add | ember |" in capsys.readouterr().out
