"""Where this process sits in a job, read from its launcher's variables: mpirun's (OpenMPI, MPICH /
PMI), Slurm's (srun) or torchrun's (which `ember launch` sets too).

`detect(environ)` is a pure function of the variables, so it is tested without launching anything.
The first launcher found wins, in this order: mpirun (OMPI_COMM_WORLD_* or PMI_RANK / PMI_SIZE),
srun (SLURM_PROCID, SLURM_NTASKS), torchrun (RANK, WORLD_SIZE); without any, a world of one.

Example:
    >>> detect({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.1",
    ...         "MASTER_PORT": "29500"}).rank
    1
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..errors import DistributedError

LAUNCHERS = ("mpirun", "srun", "torchrun", "none")
DEFAULT_PORT = 29500  # torchrun's


@dataclass(frozen=True)
class Environment:
    """This process's place: `rank` of `world_size`, `local_rank` of `local_world_size` on its node,
    the rendezvous address (torchrun's MASTER_ADDR:MASTER_PORT, used to bootstrap NCCL), and which
    launcher started it (one of `LAUNCHERS`)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    launcher: str


def detect(environ: Mapping[str, str]) -> Environment:
    """The `Environment` these variables describe (see the module docs); inconsistent values raise a
    `DistributedError` naming the variables."""
    addr = environ.get("MASTER_ADDR", "127.0.0.1")
    port = _int(environ, "MASTER_PORT", DEFAULT_PORT)
    if "OMPI_COMM_WORLD_RANK" in environ:
        found = (_int(environ, "OMPI_COMM_WORLD_RANK"), _int(environ, "OMPI_COMM_WORLD_SIZE"),
                 _int(environ, "OMPI_COMM_WORLD_LOCAL_RANK", 0), _int(environ, "OMPI_COMM_WORLD_LOCAL_SIZE", 1),
                 "mpirun", "OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE")
    elif "PMI_RANK" in environ:  # MPICH's Hydra, Intel MPI
        found = (_int(environ, "PMI_RANK"), _int(environ, "PMI_SIZE"), _int(environ, "MPI_LOCALRANKID", 0),
                 _int(environ, "MPI_LOCALNRANKS", 1), "mpirun", "PMI_RANK / PMI_SIZE")
    elif "SLURM_PROCID" in environ and "SLURM_NTASKS" in environ:
        addr = environ.get("MASTER_ADDR", environ.get("SLURM_LAUNCH_NODE_IPADDR", addr))
        per_node = environ.get("SLURM_NTASKS_PER_NODE", "").split("(")[0]
        found = (_int(environ, "SLURM_PROCID"), _int(environ, "SLURM_NTASKS"), _int(environ, "SLURM_LOCALID", 0),
                 int(per_node) if per_node.isdigit() else 1, "srun", "SLURM_PROCID / SLURM_NTASKS")
    elif "RANK" in environ or "WORLD_SIZE" in environ:
        found = (_int(environ, "RANK", 0), _int(environ, "WORLD_SIZE", 1), _int(environ, "LOCAL_RANK", 0),
                 _int(environ, "LOCAL_WORLD_SIZE", 1), "torchrun", "RANK / WORLD_SIZE")
    else:
        found = (0, 1, 0, 1, "none", "")
    rank, world, local_rank, local_world, launcher, names = found
    if world < 1 or not 0 <= rank < world:
        raise DistributedError(f"ember.distributed: {names} say rank {rank} of a world of {world}; "
                               f"expected 0 <= rank < world size")
    if not 0 <= local_rank < max(local_world, local_rank + 1):
        raise DistributedError(f"ember.distributed: local rank {local_rank} is negative ({launcher})")
    return Environment(rank, world, local_rank, max(local_world, local_rank + 1), addr, port, launcher)


def _int(environ: Mapping[str, str], name: str, default: int | None = None) -> int:
    value = environ.get(name)
    if value is None:
        if default is None:
            raise DistributedError(f"ember.distributed: {name} is not set (the launcher sets it with the rank)")
        return default
    try:
        return int(value)
    except ValueError:
        raise DistributedError(f"ember.distributed: {name}={value!r} is not an integer") from None
