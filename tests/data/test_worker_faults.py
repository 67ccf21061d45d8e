"""DataLoader workers that die, hang, or outlive a killed main process: the loader raises a clear
error in bounded time and leaves no process behind.

Scenarios that would hang a broken loader forever run in a subprocess (`data/faults.py`) under a
subprocess timeout; each starts at most two spawned workers.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import ember
from ember.data import DataLoader, Dataset, WorkerError

ROOT = Path(ember.__file__).resolve().parents[1]
TESTS = ROOT / "tests"


def _python(scenario: str, **kwargs: object) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}
    return subprocess.Popen([sys.executable, "-c", f"from data.faults import main; main({scenario!r})"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, **kwargs)


def _run(scenario: str, timeout: float = 90) -> object:
    proc = _python(scenario)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"scenario {scenario!r} hung for {timeout} s")
    assert proc.returncode == 0, f"scenario {scenario!r} exited with {proc.returncode}"
    return json.loads(out.strip().splitlines()[-1])


def test_worker_killed_halfway_through_sending_a_16mib_batch() -> None:
    got = _run("mid_send")
    assert got["error"] is not None, "the loader must not hand out a batch from a half-sent frame"
    assert "worker 1 (pid " in got["error"] and "signal SIGKILL" in got["error"]
    assert "batch 3 was due" in got["error"]
    assert got["batches"] == 3, "the batches before the broken one arrive whole and in order"
    assert got["seconds"] < 10


def test_worker_killed_while_batches_are_in_flight() -> None:
    for round_ in _run("kill"):
        assert round_["error"] is not None and "signal SIGKILL" in round_["error"], round_
        assert "worker 0 (pid " in round_["error"]
        assert round_["seconds"] < 10


class Sleepy(Dataset[np.ndarray]):
    """Item 2 takes `seconds`; the others come at once."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __len__(self) -> int:
        return 6

    def get(self, i: int) -> np.ndarray:
        if i == 2:
            time.sleep(self.seconds)
        return np.full(3, i, np.float32)


def test_timeout_names_the_worker_and_the_batch() -> None:
    # The wait for a first batch includes the workers' start-up (seconds on a busy machine).
    loader = DataLoader(Sleepy(30), batch_size=1, num_workers=2, timeout=60)
    it = iter(loader)
    assert [float(next(it)[0, 0]) for _ in range(2)] == [0.0, 1.0]
    loader.timeout = 1
    start = time.monotonic()
    with pytest.raises(WorkerError, match=r"timed out: worker 0 \(pid \d+\) did not deliver batch 2 "
                                          r"within timeout=1 s"):
        next(it)
    assert time.monotonic() - start < 5
    assert loader.state_dict()["position"] == 2


def test_a_slow_batch_within_the_timeout_arrives() -> None:
    loader = DataLoader(Sleepy(1.5), batch_size=1, num_workers=1, timeout=10)
    assert [float(b[0, 0]) for b in loader] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_timeout_is_validated() -> None:
    for bad in (-1, float("nan"), float("inf"), "1", True):
        with pytest.raises(ValueError, match="timeout must be a finite number of seconds"):
            DataLoader(Sleepy(0), batch_size=1, num_workers=1, timeout=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_workers=0 there are none"):
        DataLoader(Sleepy(0), batch_size=1, timeout=5)


def _children(pid: int) -> dict[int, str]:
    """{pid: command line} of the live processes whose parent is `pid` (from /proc)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _parent_and_state(int(entry.name))[0] == pid:
            found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    return found


def _parent_and_state(pid: int) -> tuple[int, str]:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return -1, "gone"
    state, ppid = stat.rsplit(")", 1)[1].split()[:2]
    return int(ppid), state


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("scenario", ["orphan", "orphan_fork"])
def test_killing_the_main_process_leaves_no_worker_or_tracker(scenario: str) -> None:
    proc, children = _python(scenario), {}
    try:
        assert proc.stdout is not None
        assert select.select([proc.stdout], [], [], 60)[0], "the scenario did not start its workers in 60 s"
        assert proc.stdout.readline().strip() == "ready"
        children = _children(proc.pid)
        workers = [p for p, cmd in children.items() if "resource_tracker" not in cmd]
        assert len(workers) == 2, children
        if scenario == "orphan":
            assert any("resource_tracker" in cmd for cmd in children.values()), children
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 5
        left = children
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = {p: c for p, c in left.items() if _parent_and_state(p)[1] not in ("gone", "Z")}
        assert not left, f"still running 5 s after the main process was killed: {left}"
    finally:
        proc.kill()
        proc.wait()
        for pid in children:
            if _parent_and_state(pid)[1] not in ("gone", "Z"):
                os.kill(pid, signal.SIGKILL)
