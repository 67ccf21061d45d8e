"""A run stopped after step 3 and continued in a fresh process equals the uninterrupted run bit for bit,
on every suite device, fused and unfused.

The uninterrupted run (`cases.train`) writes a checkpoint after step 3 with the Learner's
`Checkpointer`: the model's `state_dict` (ember.store native file), the optimizer's `state_dict`, the
random streams (dropout) and the losses so far. A subprocess (`resume_worker.py`) builds the model and
optimizer afresh, loads the checkpoint and trains steps 4 to 8 on the same device. The losses, every
parameter and buffer, and the optimizer's state must then have the same bytes as the uninterrupted
run's: the same ops on the same values in the same order round the same way, so any difference is
state that was not saved or not restored (a moment, a step count, a random stream, a buffer).

The cases: AdamW on the CNN (packed moments, BatchNorm's running statistics, dropout's random
stream), Muon on the transformer (a Muon state and its delegated AdamW state in one `state_dict`),
and LBFGS with the line search on the MLP (its history of curvature pairs).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .cases import Case, device_spec, train
from .resume_worker import load

RESUMED = [Case("adamw", "cnn"), Case("muon", "transformer"), Case("lbfgs", "mlp")]
STOP = 3
TESTS = Path(__file__).resolve().parents[1]


def continue_in_fresh_process(case: Case, device, folder: Path, out: Path) -> None:
    spec, fused = device_spec(device)
    path = [str(TESTS.parent), str(TESTS), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}  # this checkout's ember, and the suite's modules
    done = subprocess.run([sys.executable, "-m", "trajectories.resume_worker", case.optimizer, case.family, spec,
                           str(int(fused)), str(folder), str(out)], env=env, cwd=TESTS, capture_output=True, text=True)
    assert done.returncode == 0, f"the resumed run failed:\n{done.stderr[-4000:]}"


@pytest.mark.parametrize("case", RESUMED, ids=[c.id for c in RESUMED])
def test_resumed_run_is_bitwise_the_uninterrupted_one(device, case, tmp_path):
    full = train(case, device, checkpoint_at=STOP, folder=tmp_path / "checkpoints")
    continue_in_fresh_process(case, device, tmp_path / "checkpoints", tmp_path / "resumed.npz")
    resumed = load(tmp_path / "resumed.npz")
    assert resumed.losses.tobytes() == full.losses.tobytes(), f"losses {resumed.losses} != {full.losses}"
    for what, a, b in (("module", resumed.module, full.module), ("optimizer", resumed.optimizer, full.optimizer)):
        assert sorted(a) == sorted(b), f"{what}: the keys differ"
        differ = [k for k in b if a[k].dtype != b[k].dtype or a[k].tobytes() != b[k].tobytes()]
        assert not differ, f"{what}: not bitwise equal after resuming: {differ}"
