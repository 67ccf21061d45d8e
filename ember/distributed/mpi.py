"""The MPI backend: collectives through mpi4py and the system's MPI (OpenMPI, MPICH), on host arrays.

Ranks are those of `MPI.COMM_WORLD` (started by `mpirun`, `srun --mpi=pmix` or `ember launch`, which
runs mpirun); the group works on a duplicate of it, so user code's own MPI traffic cannot interleave.
Collectives are MPI's non-blocking ones (`Iallreduce`, `Ireduce_scatter_block`, `Iallgather`,
`Ibcast`), so `async_op=True` overlaps communication with compute as far as the MPI library makes
progress in the background (OpenMPI progresses mostly inside MPI calls: `Work.is_completed()` is one).

Example:
    >>> group = MpiGroup(local_rank=0)     # under mpirun -n 2
    >>> group.all_reduce(ember.ones(2), op="sum").tolist()
    [2.0, 2.0]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import DistributedError
from .group import HostGroup, Request


def load_mpi() -> Any:
    """mpi4py's `MPI` module, or a `DistributedError` naming the extra to install."""
    try:
        from mpi4py import MPI  # lazy: the `mpi` extra
    except ImportError as e:
        raise DistributedError(
            f"the MPI backend needs mpi4py and an MPI library: pip install 'ember[mpi]' (and the system's "
            f"OpenMPI: apt-get install openmpi-bin libopenmpi-dev) ({e})") from None
    return MPI


class MpiRequest(Request):
    __slots__ = ("_request", "_keep")

    def __init__(self, request: Any, *keep: np.ndarray) -> None:
        self._request, self._keep = request, keep  # the buffers stay alive while MPI uses them

    def wait(self) -> None:
        self._request.Wait()
        self._keep = ()

    def test(self) -> bool:
        return bool(self._request.Test())


class MpiGroup(HostGroup):
    """The ranks of `MPI.COMM_WORLD` (see the module docs)."""

    backend = "mpi"

    def __init__(self, local_rank: int = 0, comm: Any = None) -> None:
        MPI = self._MPI = load_mpi()
        self.comm = (comm if comm is not None else MPI.COMM_WORLD).Dup()
        self._ops = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}
        super().__init__(self.comm.Get_rank(), self.comm.Get_size(), local_rank)

    def _iallreduce(self, send: np.ndarray, recv: np.ndarray, op: str) -> Request:
        return MpiRequest(self.comm.Iallreduce(send, recv, op=self._ops[op]), send, recv)

    def _ireduce_scatter(self, send: np.ndarray, recv: np.ndarray, op: str) -> Request:
        return MpiRequest(self.comm.Ireduce_scatter_block(send, recv, op=self._ops[op]), send, recv)

    def _iallgather(self, send: np.ndarray, recv: np.ndarray) -> Request:
        return MpiRequest(self.comm.Iallgather(send, recv), send, recv)

    def _ibcast(self, buffer: np.ndarray, src: int) -> Request:
        return MpiRequest(self.comm.Ibcast(buffer, root=src), buffer)

    def barrier(self) -> None:
        self.comm.Barrier()

    def all_gather_object(self, obj: Any) -> list:
        return self.comm.allgather(obj)

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        return self.comm.bcast(obj, root=src)

    def abort(self, code: int = 1) -> None:
        self._MPI.COMM_WORLD.Abort(code)

    def destroy(self) -> None:
        if self.comm is not None:
            self.comm.Free()
            self.comm = None


def world_of_mpi(expected: int, launcher: str) -> None:
    """Check that MPI sees the world the launcher announced (srun without PMIx starts singletons)."""
    size = load_mpi().COMM_WORLD.Get_size()
    if size != expected:
        raise DistributedError(f"ember.distributed: {launcher} announced {expected} ranks but MPI sees {size}; "
                               f"under Slurm, start MPI ranks with srun --mpi=pmix (or mpirun inside the job)")
