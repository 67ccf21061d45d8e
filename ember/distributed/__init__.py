"""ember.distributed: process groups and collectives over MPI (CPU) and NCCL (CUDA); `ember launch`.

`init()` reads the launcher's variables (mpirun, srun, torchrun / `ember launch`) and returns the
group; the functions here run on it. Collectives take and return ember tensors (see
`ember.distributed.group`). Data-parallel training on top: `ember.train.DataParallel`,
`Learner(strategy="ddp")`, `ember.data.DistributedSampler` (docs/distributed.md).

Example:
    >>> import ember, ember.distributed as dist
    >>> group = dist.init()                       # a world of one without a launcher
    >>> dist.all_reduce(ember.ones(2) * 3, op="max").tolist()
    [3.0, 3.0]
"""

from __future__ import annotations

from typing import Any

from ..tensor import Tensor
from .env import Environment, detect
from .group import OPS, HostGroup, ProcessGroup, SingleProcess, Work
from .world import destroy, group, init, is_initialized, rank, world_size


def all_reduce(tensor: Tensor, op: str = "sum", async_op: bool = False) -> Tensor | Work:
    """`group().all_reduce`: `op` ("sum", "mean", "max", "min") of `tensor` over every rank."""
    return group().all_reduce(tensor, op, async_op)


def reduce_scatter(tensor: Tensor, op: str = "sum", async_op: bool = False) -> Tensor | Work:
    """`group().reduce_scatter`: this rank's block (dim 0) of the reduction over every rank."""
    return group().reduce_scatter(tensor, op, async_op)


def all_gather(tensor: Tensor, async_op: bool = False) -> Tensor | Work:
    """`group().all_gather`: every rank's `tensor` joined along dim 0."""
    return group().all_gather(tensor, async_op)


def broadcast(tensor: Tensor, src: int = 0, async_op: bool = False) -> Tensor | Work:
    """`group().broadcast`: rank `src`'s `tensor` on every rank."""
    return group().broadcast(tensor, src, async_op)


def barrier() -> None:
    """`group().barrier()`: wait for every rank."""
    group().barrier()


def all_gather_object(obj: Any) -> list:
    """`group().all_gather_object`: every rank's picklable `obj`, in rank order."""
    return group().all_gather_object(obj)


__all__ = [
    "OPS", "Environment", "HostGroup", "ProcessGroup", "SingleProcess", "Work", "all_gather", "all_gather_object",
    "all_reduce", "barrier", "broadcast", "destroy", "detect", "group", "init", "is_initialized", "rank",
    "reduce_scatter", "world_size",
]
