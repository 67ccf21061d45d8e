"""The fresh process of the resume test: continue a case from its checkpoint and write the trajectory.

    python -m trajectories.resume_worker OPTIMIZER FAMILY DEVICE FUSED CHECKPOINTS OUT.npz

(run with `tests/` and the repository root on PYTHONPATH; DEVICE is a device string such as "cpu" or
"wgpu:0", FUSED 1 or 0). OUT.npz holds `losses`, `module/<name>` and `optimizer/<key>` arrays.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import ember
import ember.debug

from .cases import Case, Trajectory, resume


def save(path: Path, traj: Trajectory) -> None:
    np.savez(path, losses=traj.losses, **{f"module/{k}": v for k, v in traj.module.items()},
             **{f"optimizer/{k}": v for k, v in traj.optimizer.items()})


def load(path: Path) -> Trajectory:
    with np.load(path) as data:
        part = {what: {k.split("/", 1)[1]: data[k] for k in data.files if k.startswith(what + "/")}
                for what in ("module", "optimizer")}
        return Trajectory(data["losses"], part["module"], part["optimizer"])


def main(optimizer: str, family: str, spec: str, fused: str, folder: str, out: str) -> None:
    device = ember.Device(spec)
    if ember.debug.fusion_backend(device) is not None:
        ember.debug.set_fusion(device, fused == "1")
    save(Path(out), resume(Case(optimizer, family), device, Path(folder)))


if __name__ == "__main__":
    main(*sys.argv[1:])
