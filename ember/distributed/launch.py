"""`ember launch`: start the ranks of a job on this node, with torchrun's conventions.

    ember launch --nproc 4 train.py --lr 0.1                  # 4 ranks here
    ember launch --nproc 8 --nnodes 2 --node-rank 0 --master 10.0.0.1:29500 train.py   # on each node

Two ways to start them (`via`): "mpirun" runs `mpirun -n N` (the MPI backend needs ranks MPI started;
OpenMPI gets --oversubscribe --bind-to none, and its run-as-root variables when run as root); "spawn"
starts the processes itself with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK,
MASTER_ADDR and MASTER_PORT (NCCL bootstraps there; several nodes need this). "auto": mpirun when it is
on PATH and the job has one node, else spawn. SIGINT and SIGTERM are passed on to the ranks. When a
rank fails, every rank is ended, and the launcher prints which rank failed with its traceback (ranks
write it to $EMBER_ERROR_DIR after `ember.distributed.init()`) and exits with its status.

Example:
    >>> launch("train.py", ["--epochs", "1"], nproc=2)  # doctest: +SKIP
    0
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from ..errors import DistributedError
from .env import DEFAULT_PORT

VIAS = ("auto", "mpirun", "spawn")
GRACE = 5.0  # seconds ranks get to end after SIGTERM before SIGKILL


def launch(script: str, args: Sequence[str] = (), nproc: int = 1, nnodes: int = 1, node_rank: int = 0,
           master: str = f"127.0.0.1:{DEFAULT_PORT}", via: str = "auto", python: str = sys.executable) -> int:
    """Run `python script args` as `nproc` local ranks of `nnodes * nproc`; returns the exit status."""
    for name, value, least in (("nproc", nproc, 1), ("nnodes", nnodes, 1), ("node_rank", node_rank, 0)):
        if not isinstance(value, int) or value < least:
            raise DistributedError(f"ember launch: --{name.replace('_', '-')} must be an integer >= {least}, got {value!r}")
    if node_rank >= nnodes:
        raise DistributedError(f"ember launch: --node-rank {node_rank} is not below --nnodes {nnodes}")
    addr, _, port = master.rpartition(":")
    if not addr or not port.isdigit():
        raise DistributedError(f"ember launch: --master must be ADDR:PORT, got {master!r}")
    if via not in VIAS:
        raise DistributedError(f"ember launch: --via must be one of {VIAS}, got {via!r}")
    mpirun = shutil.which("mpirun")
    if via == "auto":
        via = "mpirun" if mpirun and nnodes == 1 else "spawn"
    if via == "mpirun" and (mpirun is None or nnodes > 1):
        raise DistributedError("ember launch --via mpirun: " + (
            "mpirun is not on PATH (apt-get install openmpi-bin)" if mpirun is None else
            "across nodes, start the job with mpirun or srun and a host list; ember launch --via spawn "
            "starts NCCL ranks on each node"))
    with tempfile.TemporaryDirectory(prefix="ember-launch-") as errors:
        env = {**os.environ, "EMBER_ERROR_DIR": errors, "MASTER_ADDR": addr, "MASTER_PORT": port}
        command = [python, script, *args]
        if via == "mpirun":
            procs = [_start(_mpirun_command(mpirun, nproc) + command, _mpirun_env(env))]
            ranks = None
        else:
            ranks = [node_rank * nproc + i for i in range(nproc)]
            procs = [_start(command, {**env, "RANK": str(r), "WORLD_SIZE": str(nnodes * nproc), "LOCAL_RANK": str(i),
                                      "LOCAL_WORLD_SIZE": str(nproc), "NODE_RANK": str(node_rank),
                                      "GROUP_RANK": str(node_rank)})
                     for i, r in enumerate(ranks)]
        status, failed = _supervise(procs)
        if status:
            _report(Path(errors), status, failed if ranks is None else ranks[failed])
    return status


def _mpirun_command(mpirun: str, nproc: int) -> list[str]:
    command = [mpirun, "-n", str(nproc)]
    version = subprocess.run([mpirun, "--version"], capture_output=True, text=True).stdout
    if "Open MPI" in version:
        command += ["--oversubscribe", "--bind-to", "none"]
    return command


def _mpirun_env(env: dict) -> dict:
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # OpenMPI refuses root without both
        env = {**env, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    return env


def _start(command: list[str], env: dict) -> subprocess.Popen:
    # A session of its own: ending it ends the rank's children too (data-loader workers).
    return subprocess.Popen(command, env=env, start_new_session=True)


def _supervise(procs: list[subprocess.Popen]) -> tuple[int, int | None]:
    """Wait for every process; on the first failure end the others. (status, index of the failed one)."""
    received: list[int] = []

    def forward(signum, frame) -> None:
        received.append(signum)
        for p in procs:
            _signal(p, signal.SIGTERM if len(received) > 1 else signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            codes = [p.poll() for p in procs]
            bad = next((i for i, c in enumerate(codes) if c not in (None, 0)), None)
            if bad is not None:
                _end(procs)
                return _status(codes[bad]), bad
            if all(c == 0 for c in codes):
                return 0, None
            time.sleep(0.05)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _end(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        _signal(p, signal.SIGTERM)
    deadline = time.monotonic() + GRACE
    for p in procs:
        try:
            p.wait(max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            _signal(p, signal.SIGKILL)
            p.wait()


def _signal(p: subprocess.Popen, signum: int) -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, signum)
        except ProcessLookupError:
            pass


def _status(code: int) -> int:
    return 128 - code if code < 0 else code  # killed by signal N: the shell's 128 + N


def _report(errors: Path, status: int, rank: int | None) -> None:
    tracebacks = sorted(errors.glob("rank*.txt"), key=lambda p: int(p.stem[4:]))
    lines = []
    for path in tracebacks:
        lines.append(f"ember launch: rank {path.stem[4:]} failed:\n{path.read_text().rstrip()}")
    if not tracebacks:
        who = f"rank {rank}" if rank is not None else "a rank (mpirun's message above names it)"
        how = f"was killed by signal {status - 128}" if status > 128 else f"exited with status {status}"
        lines.append(f"ember launch: {who} {how}; no traceback was recorded (a rank writes one after "
                     f"ember.distributed.init(); see the output above)")
    lines.append("ember launch: every rank was ended")
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()
