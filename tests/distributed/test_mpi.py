"""Collectives, DDP, ZeRO-1, failures and resume over MPI ranks on loopback (mpirun, `ember launch`).

Each case runs tests/distributed/ranks.py on every rank, which checks against NumPy or a
single-process run and exits non-zero on a mismatch."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ember.distributed import SingleProcess
from tests.distributed.problem import fit

pytestmark = pytest.mark.slow  # each case starts 2 to 4 interpreters under mpirun

ROOT = Path(__file__).resolve().parents[2]
RANKS = str(Path(__file__).with_name("ranks.py"))
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def launch(nproc: int, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ember.cli", "launch", "--nproc", str(nproc), *args],
                          env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def check(result: subprocess.CompletedProcess, nproc: int, case: str) -> None:
    assert result.returncode == 0, result.stdout + result.stderr
    for r in range(nproc):
        assert f"rank {r} of {nproc}: {case} ok" in result.stdout


@pytest.mark.parametrize("nproc", [2, 4])
def test_collectives_against_numpy(nproc):
    check(launch(nproc, RANKS, "collectives"), nproc, "collectives")


@pytest.mark.parametrize("nproc", [2, 4])
def test_ddp_equals_one_process_with_the_whole_batch(nproc):
    check(launch(nproc, RANKS, "ddp"), nproc, "ddp")


def test_zero1_equals_ddp():
    check(launch(2, RANKS, "zero"), 2, "zero")


@pytest.mark.parametrize("how", ["raise", "kill"])
def test_a_failing_rank_ends_every_rank(how):
    started = time.monotonic()
    result = launch(3, RANKS, "fail", how, timeout=90)
    assert result.returncode != 0
    assert time.monotonic() - started < 90
    if how == "raise":
        assert "ember launch: rank 1 failed:" in result.stderr and "ValueError: rank 1 fails on purpose" in result.stderr
    assert "every rank was ended" in result.stderr
    assert "fail ok" not in result.stdout


def test_spawned_ranks_end_when_one_fails(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text("import os, sys, time\nif os.environ['RANK'] == '1':\n    sys.exit(3)\ntime.sleep(60)\n")
    started = time.monotonic()
    result = launch(2, "--via", "spawn", str(script), timeout=60)
    assert result.returncode == 3 and time.monotonic() - started < 30
    assert "rank 1 exited with status 3" in result.stderr


def test_resume_on_another_number_of_ranks(tmp_path):
    """One epoch on 2 ranks (ZeRO-1), the second resumed on 1: equals 2 epochs in one process."""
    check(launch(2, RANKS, "checkpoint", str(tmp_path)), 2, "checkpoint")
    resumed = fit(group=SingleProcess(), epochs=2, run_dir=str(tmp_path), resume=str(tmp_path), optimizer="adamw")
    oracle = fit(None, epochs=2, optimizer="adamw")
    for k in oracle:
        np.testing.assert_allclose(resumed[k], oracle[k], rtol=1e-5, atol=1e-6, err_msg=k)
