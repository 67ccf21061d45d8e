"""`python -m bench --report`: RESULTS.md from a results folder. Two small results files (a CPU suite run
and a GPU run through `bench.gpu.report_rows`) with random times; the tables' rows, times and ratios are
read back and checked against the rows that went in."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from bench.__main__ import main
from bench.gpu import report_rows
from bench.harness import Row, write_json
from bench.report import NOTES, ReportError, report, write_report

NOTES_TEXT = "## Peers\n\nHand-written: how each peer is configured.\n"


def cpu_rows(rng: np.random.Generator) -> list[Row]:
    """A suite run: two ember implementations of one case, a case torch measures under two labels, a
    peer skipped in one case, and tinygrad skipped everywhere (not installed)."""
    t = lambda: float(rng.uniform(1, 5e5))  # noqa: E731
    return [Row("matmul", "64x64 | f32", "numpy", t()), Row("matmul", "64x64 | f32", "ember", t()),
            Row("matmul", "64x64 | f32", "ember cube kernel", t(), "alone"),
            Row("matmul", "64x64 | f32", "torch", t(), "device cpu"),
            Row("matmul", "64x64 | f32", "tinygrad", None, "skipped: tinygrad is not installed"),
            Row("load_record", "load 1 MiB", "ember native", t()), Row("load_record", "load 1 MiB", "torch.load", t()),
            Row("load_record", "load 1 MiB", "torch", t()), Row("load_record", "load 1 MiB", "torch.compile", t()),
            Row("load_record", "load 1 MiB", "numpy", None, "skipped: cannot express this case"),
            Row("load_record", "load 1 MiB", "tinygrad", None, "skipped: tinygrad is not installed")]


def gpu_rows(rng: np.random.Generator) -> list[dict]:
    """bench.gpu's own rows: rates, extra figures, a failed row."""
    ms = lambda: round(float(rng.uniform(0.01, 90)), 4)  # noqa: E731
    return [dict(case="gelu f32 2^28", impl="ember cube custom_gelu", ms=ms(), rate=2.1, unit="TB/s",
                 rel_error="1e-07"),
            dict(case="gelu f32 2^28", impl="torch gelu", ms=ms(), rate=1.9, unit="TB/s"),
            dict(case="matmul bf16 8192^3", impl="cube tc 128x128x64 w64x64 s3 g8 (default)", ms=ms(), rate=340.0,
                 unit="TFLOP/s"),
            dict(case="matmul bf16 8192^3", impl="torch.matmul", ms=ms(), rate=700.0, unit="TFLOP/s"),
            dict(case="GPT step", impl="torch", ms=ms(), rate=17.0, unit="steps/s", peak_allocated_MiB=1.0),
            dict(case="GPT step", impl="ember", ms=None, rate=None, unit="ms/step", note="failed"),
            dict(case="GPT step", impl="torch.compile", ms=ms(), rate=18.0, unit="steps/s")]


@pytest.fixture
def results(tmp_path):
    rng = np.random.default_rng(7)
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / NOTES).write_text(NOTES_TEXT)
    cpu = cpu_rows(rng)
    write_json(str(folder / "cpu.json"), cpu, {"device": 'Device("cpu")', "peers": ["ember", "numpy", "torch"],
                                               "command": "python -m bench --device cpu --json x.json"})
    gpu = report_rows(gpu_rows(rng), ["gelu", "gelu", "matmul", "matmul", "gpt", "gpt", "gpt"])
    write_json(str(folder / "h200-cuda.json"), gpu, {"device": "Device.cuda(0)", "gpu": "NVIDIA H200",
                                                     "command": "python -m bench.gpu --results y.json"})
    return folder, cpu, gpu


def section(text: str, name: str) -> list[str]:
    """The lines of results file `name`'s section, up to the next section."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"## {name}:"))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def table(lines: list[str]) -> list[dict[str, str]]:
    """A markdown table's rows as {column: cell}; a cell's escaped "|" kept as "|"."""
    cells = [[c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
             for line in lines if line.startswith("|")]
    return [dict(zip(cells[0], row)) for row in cells[2:]]


def seconds(cell: str) -> float:
    value, unit = cell.split()[-2:]
    return float(value) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[unit]


def ratios(cell: str) -> dict[str, float]:
    """"torch.load 0.85; 1.20" -> {"torch.load": 0.85, "": 1.2}."""
    out = {}
    for part in filter(None, cell.split("; ")):
        *label, value = part.split()
        out[" ".join(label)] = float(value)
    return out


def test_tables_hold_every_ember_row_with_its_peers_and_ratios(results) -> None:
    folder, cpu, gpu = results
    text = report(folder)
    assert text.startswith("# Benchmark results")
    assert "ember's time over the peer's: below 1, ember is faster" in " ".join(text.split())
    assert "git log -p bench/RESULTS.md" in text and NOTES_TEXT.strip() in text
    assert text.index("## cpu.json: Device(\"cpu\")") < text.index("## h200-cuda.json: Device.cuda(0)")
    assert "No GPU results" not in text  # the GPU file is there
    for name, rows in (("cpu.json", cpu), ("h200-cuda.json", gpu)):
        lines = section(text, name)
        got = table(lines)
        embers = [r for r in rows if r.impl.startswith("ember")]
        assert [(g["bench"], g["case"], g["ember impl"]) for g in got] == [(r.bench, r.case, r.impl) for r in embers]
        for g, ember in zip(got, embers):
            peers = [r for r in rows if r.case == ember.case and not r.impl.startswith("ember")]
            if ember.median_us is None:
                assert g["ember"] == "-" and ember.note in g["notes"]
            else:
                assert seconds(g["ember"]) == pytest.approx(ember.median_us * 1e-6, rel=5e-3)
            for p in peers:
                col = "torch.compile" if p.impl == "torch.compile" else re.match(r"[a-z]*", p.impl).group()
                if col not in g:  # a peer measured nowhere in the file has no column
                    assert p.median_us is None and col == "tinygrad"
                    assert f"not measured: tinygrad ({p.note})" in "\n".join(lines)
                    continue
                label = "" if p.impl == col else p.impl
                if p.median_us is None:
                    assert g[col] == "-" and f"{p.impl}: {p.note}" in g["notes"]
                    continue
                times = {(" ".join(part.split()[:-2])): seconds(part) for part in g[col].split("; ")}
                assert times[label] == pytest.approx(p.median_us * 1e-6, rel=5e-3)
                if ember.median_us is not None:
                    assert ratios(g[f"ember/{col}"])[label] == pytest.approx(ember.median_us / p.median_us, rel=5e-3)
                else:
                    assert g[f"ember/{col}"] == ""
        described = "\n".join(lines)
        payload = json.loads((folder / name).read_text())
        assert f"ember commit: {payload['run']['commit']}" in described
        assert f"- command: `{payload['run']['command']}`" in described
        assert f"torch {payload['machine']['torch']}" in described and payload["machine"]["date"] in described


def test_gpu_rows_keep_their_rates_and_figures(results) -> None:
    folder, _, gpu = results
    got = {g["ember impl"]: g for g in table(section(report(folder), "h200-cuda.json"))}
    assert got["ember cube custom_gelu"]["notes"].startswith("2.1 TB/s, rel_error=1e-07; torch gelu: 1.9 TB/s")
    assert "ember cube tc 128x128x64 w64x64 s3 g8 (default)" in got  # ember's kernel, not a peer "cube"
    assert got["ember"]["ember"] == "-" and "failed" in got["ember"]["notes"]
    assert set(got["ember"]) >= {"torch", "torch.compile"}


def test_report_is_deterministic_and_written_by_the_cli(results, tmp_path) -> None:
    folder, _, _ = results
    first, second = tmp_path / "first.md", tmp_path / "second.md"
    write_report(folder, first)
    assert main(["--report", "--results", str(folder), "--out", str(second)]) == 0
    assert first.read_bytes() == second.read_bytes() == report(folder).encode()


def test_placeholder_for_gpu_results_until_a_cuda_file_is_there(results) -> None:
    folder, _, _ = results
    (folder / "h200-cuda.json").unlink()
    text = report(folder)
    assert "## GPU" in text and "bench-cuda.json" in text and "## h200-cuda.json" not in text


def test_no_results_is_a_clear_error(tmp_path, capsys) -> None:
    (tmp_path / NOTES).write_text(NOTES_TEXT)
    with pytest.raises(ReportError, match=r"no results to report: .* holds no \*\.json results file"):
        report(tmp_path)
    with pytest.raises(ReportError, match="no results to report"):
        report(tmp_path / "absent")
    out = tmp_path / "RESULTS.md"
    with pytest.raises(SystemExit) as exit_:
        main(["--report", "--results", str(tmp_path), "--out", str(out)])
    assert exit_.value.code == 2 and "no results to report" in capsys.readouterr().err and not out.exists()


def test_missing_notes_or_a_bad_file_is_a_clear_error(results) -> None:
    folder, _, _ = results
    (folder / "bad.json").write_text(json.dumps({"machine": {}, "run": {}, "rows": [{"bench": "b", "case": "c"}]}))
    with pytest.raises(ReportError, match=r"bad\.json is not a results file .* row 0 should have"):
        report(folder)
    (folder / "bad.json").write_text("[1, 2]")
    with pytest.raises(ReportError, match=r"bad\.json .* should hold an object"):
        report(folder)
    (folder / "bad.json").unlink()
    (folder / NOTES).unlink()
    with pytest.raises(ReportError, match="notes.md is missing"):
        report(folder)
