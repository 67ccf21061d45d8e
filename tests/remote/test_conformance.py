"""A named subset of the conformance suite on Device.remote to a cpu server: the suite's own tests, run
in a pytest subprocess with EMBER_TEST_REMOTE set (tests/conftest.py then adds the "remote" device).

The subset (SUBSET): elementwise binary ops, sums and products, matmul, movement across dtypes, gather
and scatter, and their gradients: f32 only, since the whole suite on a fresh server compiles every
kernel again (minutes on CI's two cores).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .conftest import ROOT

SUBSET = ("test_binary or test_sum_prod or test_matmul or test_movement_dtypes or test_gather_scatter "
          "or test_binary_grad or test_matmul_grad")
FILES = ("tests/conformance/test_math.py", "tests/conformance/test_reduce.py", "tests/conformance/test_linalg.py",
         "tests/conformance/test_shape.py", "tests/conformance/test_index.py")


@pytest.mark.slow
def test_conformance_subset_on_a_remote_cpu_server(server):
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *FILES,
                          "-k", f"remote and f32 and ({SUBSET})"], cwd=ROOT, capture_output=True, text=True,
                         timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT), "EMBER_TEST_REMOTE": server.ticket})
    summary = run.stdout.strip().splitlines()[-1]
    assert run.returncode == 0, run.stdout[-4000:]
    assert " passed" in summary and "failed" not in summary and int(summary.split(" passed")[0].split()[-1]) >= 20
