"""`init()`: this process's group, from its launcher's variables; the group the other calls default to.

The backend: "nccl" for a CUDA `device`, else "mpi"; a world of one rank without a launcher is a
`SingleProcess` group (a script runs unchanged without `ember launch`). MPI needs ranks started by
mpirun or srun (`ember launch` starts them with mpirun); NCCL takes either, and without mpirun
bootstraps at MASTER_ADDR:MASTER_PORT. A rank that dies of an uncaught exception after `init()`
writes its traceback (to stderr and, under `ember launch`, to `$EMBER_ERROR_DIR/rank<r>.txt`) and aborts the
job, so no other rank waits forever in a collective.

Example:
    >>> group = ember.distributed.init()
    >>> group.rank, group.size
    (0, 1)
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any, Mapping

from ..device import Device
from ..errors import DistributedError
from .env import Environment, detect
from .group import ProcessGroup, SingleProcess

BACKENDS = ("mpi", "nccl", "single")
_current: ProcessGroup | None = None


def init(backend: str | None = None, device: Any = None, environ: Mapping[str, str] | None = None) -> ProcessGroup:
    """Start (once) and return this process's group (see the module docs).

    Args:
        backend: "mpi", "nccl" or "single"; None picks from `device` and the launcher.
        device: the device this rank computes on; for NCCL, default `Device.cuda(local_rank)`.
        environ: the variables to read (default `os.environ`).
    """
    global _current
    if _current is not None:
        if backend is not None and backend != _current.backend:
            raise DistributedError(f"init(backend={backend!r}): this process already has a {_current.backend} group")
        return _current
    env = detect(os.environ if environ is None else environ)
    device = Device(device) if device is not None else None
    if backend is None:
        cuda = device is not None and device.inner.kind == "cuda"
        backend = "nccl" if cuda else ("single" if env.world_size == 1 and env.launcher == "none" else "mpi")
    if backend not in BACKENDS:
        raise DistributedError(f"init: unknown backend {backend!r}; known: {BACKENDS}")
    _current = _start(backend, env, device)
    _install_excepthook(_current)
    return _current


def _start(backend: str, env: Environment, device: Device | None) -> ProcessGroup:
    if backend == "single":
        if env.world_size != 1:
            raise DistributedError(f"init: backend 'single' is one process, but {env.launcher} started "
                                   f"{env.world_size} ranks")
        return SingleProcess()
    if backend == "mpi":
        if env.launcher == "torchrun" and env.world_size > 1:
            raise DistributedError(
                f"init: the MPI backend needs ranks started by mpirun or srun; rank {env.rank} of {env.world_size} "
                f"was started with torchrun's variables (RANK, WORLD_SIZE). Start the job with `ember launch "
                f"--nproc N script.py` (which runs mpirun) or mpirun itself, or use backend='nccl' on GPUs")
        from .mpi import MpiGroup, world_of_mpi  # lazy: the `mpi` extra
        if env.launcher != "none":
            world_of_mpi(env.world_size, env.launcher)
        return MpiGroup(env.local_rank)
    from .nccl import NcclGroup, new_unique_id  # lazy: the `nccl` extra
    device = device if device is not None else Device.cuda(env.local_rank)
    uid = new_unique_id() if env.rank == 0 else None
    if env.launcher in ("mpirun", "srun") and env.world_size > 1:
        from .mpi import load_mpi
        uid = load_mpi().COMM_WORLD.bcast(uid, root=0)
    else:
        from .rendezvous import share
        uid = share(uid, env.rank, env.world_size, env.master_addr, env.master_port)
    return NcclGroup(env.rank, env.world_size, env.local_rank, device, uid)


def _install_excepthook(group: ProcessGroup) -> None:
    previous = sys.excepthook

    def hook(kind, value, tb) -> None:
        text = "".join(traceback.format_exception(kind, value, tb))
        folder = os.environ.get("EMBER_ERROR_DIR")
        if folder:
            with open(os.path.join(folder, f"rank{group.rank}.txt"), "w") as f:
                f.write(text)
        if group.size == 1:
            return previous(kind, value, tb)
        sys.stderr.write(f"[rank {group.rank}] {text}")
        sys.stderr.flush()
        group.abort(1)

    sys.excepthook = hook


def group() -> ProcessGroup:
    """The group `init()` made; a `DistributedError` before it."""
    if _current is None:
        raise DistributedError("ember.distributed: no process group yet; call ember.distributed.init() first")
    return _current


def is_initialized() -> bool:
    return _current is not None


def destroy() -> None:
    """Free the current group (a later `init()` makes a new one)."""
    global _current
    if _current is not None:
        _current.destroy()
        _current = None


def rank() -> int:
    """This process's rank (0 without a group)."""
    return _current.rank if _current is not None else 0


def world_size() -> int:
    """The number of ranks (1 without a group)."""
    return _current.size if _current is not None else 1
