"""`ProcessGroup`: the ranks of a job and the collectives between them, on ember tensors.

Collectives return new tensors (ember tensors are values; PyTorch's work in place), on the input's
device and not tracked by autodiff. `async_op=True` returns a `Work` whose `wait()` gives the result.
Every rank must call the same collectives in the same order, with tensors of the same shape and dtype.

- `all_reduce(t, op)`: op "sum", "mean" (floats), "max" or "min" over the ranks, elementwise.
- `reduce_scatter(t, op)`: the reduction of `t` over the ranks, split in `size` equal blocks along
  dim 0; rank r gets block r (dim 0 must divide by the world size).
- `all_gather(t)`: every rank's `t` joined along dim 0, in rank order (scalars: shape (size,)).
- `broadcast(t, src)`: rank `src`'s `t` on every rank. `barrier()`: wait for every rank.

`HostGroup` implements them for backends that move host arrays (MPI, one process): a tensor is read to
the host, f16 and bf16 are reduced in f32 (MPI has no half types) and rounded back once.

Example:
    >>> group = ember.distributed.init()
    >>> group.all_reduce(ember.ones(3) * (group.rank + 1), op="sum")     # rank r adds r + 1
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..api.creation import from_numpy
from ..errors import DistributedError
from ..tensor import Tensor

OPS = ("sum", "mean", "max", "min")


class Work:
    """A collective in flight: `wait()` returns its result, `is_completed()` asks without waiting.

    Example:
        >>> work = group.all_reduce(grad, op="mean", async_op=True)
        >>> grad = work.wait()
    """

    __slots__ = ("_finish", "_test", "_result")

    def __init__(self, finish: Callable[[], Tensor], test: Callable[[], bool] = lambda: True) -> None:
        self._finish, self._test, self._result = finish, test, None

    def wait(self) -> Tensor:
        if self._result is None:
            self._result = self._finish()
        return self._result

    def is_completed(self) -> bool:
        return self._result is not None or bool(self._test())


class ProcessGroup:
    """The ranks of a job and their collectives (see the module docs); made by `ember.distributed.init`.

    Attributes: `backend` ("mpi", "nccl", "single"), `rank`, `size`, `local_rank`.
    """

    backend = "none"

    def __init__(self, rank: int, size: int, local_rank: int = 0) -> None:
        self.rank, self.size, self.local_rank = rank, size, local_rank

    # ---- the collectives, checked here, run by the backend's _methods ---------------------------
    def all_reduce(self, tensor: Tensor, op: str = "sum", async_op: bool = False) -> Tensor | Work:
        """`op` of `tensor` over every rank (see the module docs)."""
        self._check(tensor, "all_reduce", op)
        return _done(self._all_reduce(tensor, op), async_op)

    def reduce_scatter(self, tensor: Tensor, op: str = "sum", async_op: bool = False) -> Tensor | Work:
        """Block `rank` (along dim 0) of `op` of `tensor` over every rank."""
        self._check(tensor, "reduce_scatter", op)
        if not tensor.shape or tensor.shape[0] % self.size:
            raise DistributedError(f"reduce_scatter: dim 0 of a tensor of shape {tensor.shape} does not divide "
                                   f"into {self.size} blocks (one per rank); pad it to a multiple of {self.size}")
        return _done(self._reduce_scatter(tensor, op), async_op)

    def all_gather(self, tensor: Tensor, async_op: bool = False) -> Tensor | Work:
        """Every rank's `tensor` joined along dim 0, in rank order (scalars stack to shape (size,))."""
        self._check(tensor, "all_gather", None)
        return _done(self._all_gather(tensor), async_op)

    def broadcast(self, tensor: Tensor, src: int = 0, async_op: bool = False) -> Tensor | Work:
        """Rank `src`'s `tensor`, on every rank."""
        self._check(tensor, "broadcast", None)
        if not isinstance(src, int) or not 0 <= src < self.size:
            raise DistributedError(f"broadcast: src {src!r} is not a rank of this group (0..{self.size - 1})")
        return _done(self._broadcast(tensor, src), async_op)

    def barrier(self) -> None:
        """Return once every rank has called `barrier()`."""
        raise NotImplementedError

    def all_gather_object(self, obj: Any) -> list:
        """Every rank's picklable `obj`, in rank order (for metrics and small state, not for tensors)."""
        raise NotImplementedError

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """Rank `src`'s picklable `obj` on every rank."""
        return self.all_gather_object(obj if self.rank == src else None)[src]

    def abort(self, code: int = 1) -> None:
        """End every rank of the job at once (a failing rank calls it so the others never hang)."""
        raise SystemExit(code)

    def destroy(self) -> None:
        """Free the group's resources; it cannot be used afterwards."""

    def __repr__(self) -> str:
        return f"ProcessGroup(backend={self.backend!r}, rank={self.rank}, size={self.size})"

    # ---- what a backend implements ----------------------------------------------------------------
    def _all_reduce(self, tensor: Tensor, op: str) -> Work:
        raise NotImplementedError

    def _reduce_scatter(self, tensor: Tensor, op: str) -> Work:
        raise NotImplementedError

    def _all_gather(self, tensor: Tensor) -> Work:
        raise NotImplementedError

    def _broadcast(self, tensor: Tensor, src: int) -> Work:
        raise NotImplementedError

    def _check(self, tensor: Any, what: str, op: str | None) -> None:
        if not isinstance(tensor, Tensor):
            raise TypeError(f"{what} takes an ember Tensor, got {type(tensor).__name__}")
        if op is None:
            return
        if op not in OPS:
            raise DistributedError(f"{what}: unknown op {op!r}; known: {OPS}")
        if op == "mean" and not tensor.dtype.is_float:
            raise DistributedError(f"{what}: op 'mean' needs a float tensor, got {tensor.dtype} (use 'sum')")
        if op in ("sum", "mean") and tensor.dtype.name == "bool":
            raise DistributedError(f"{what}: op {op!r} of bool tensors is not defined; use 'max' (any) or "
                                   f"'min' (all), or cast first")


def _done(work: Work, async_op: bool) -> Tensor | Work:
    return work if async_op else work.wait()


class Request:
    """A host collective in flight: `wait()` blocks, `test()` asks (MPI's requests have both)."""

    def wait(self) -> None:
        pass

    def test(self) -> bool:
        return True


class HostGroup(ProcessGroup):
    """Collectives on host arrays (see the module docs); a backend implements the `_i*` methods, which
    start a collective between NumPy buffers and return a `Request`."""

    def _all_reduce(self, tensor: Tensor, op: str) -> Work:
        array, send = _reduce_buffer(tensor)
        recv = np.empty_like(send)
        request = self._iallreduce(send, recv, _wire_op(op))
        return Work(lambda: (request.wait(), self._reduced(recv, op, array.dtype, tensor))[1], request.test)

    def _reduce_scatter(self, tensor: Tensor, op: str) -> Work:
        array, send = _reduce_buffer(tensor)
        recv = np.empty((send.shape[0] // self.size, *send.shape[1:]), send.dtype)
        request = self._ireduce_scatter(send, recv, _wire_op(op))
        return Work(lambda: (request.wait(), self._reduced(recv, op, array.dtype, tensor))[1], request.test)

    def _all_gather(self, tensor: Tensor) -> Work:
        array = _host(tensor)
        recv = np.empty((self.size, *array.shape), array.dtype)
        request = self._iallgather(_bytes(array), _bytes(recv))
        shape = (self.size * array.shape[0], *array.shape[1:]) if array.ndim else (self.size,)
        return Work(lambda: (request.wait(), _tensor(recv.reshape(shape), tensor))[1], request.test)

    def _broadcast(self, tensor: Tensor, src: int) -> Work:
        buffer = _host(tensor).copy()
        request = self._ibcast(_bytes(buffer), src)
        return Work(lambda: (request.wait(), _tensor(buffer, tensor))[1], request.test)

    def _reduced(self, recv: np.ndarray, op: str, dtype: np.dtype, like: Tensor) -> Tensor:
        if op == "mean":
            recv = recv / np.asarray(self.size, recv.dtype)
        return _tensor(recv.astype(dtype, copy=False), like)

    def _iallreduce(self, send: np.ndarray, recv: np.ndarray, op: str) -> Request:
        raise NotImplementedError

    def _ireduce_scatter(self, send: np.ndarray, recv: np.ndarray, op: str) -> Request:
        raise NotImplementedError

    def _iallgather(self, send: np.ndarray, recv: np.ndarray) -> Request:
        raise NotImplementedError

    def _ibcast(self, buffer: np.ndarray, src: int) -> Request:
        raise NotImplementedError


class SingleProcess(HostGroup):
    """A world of one rank (no launcher): each collective returns its input's values, as it must.

    Example:
        >>> SingleProcess().all_reduce(ember.ones(2), op="mean").tolist()
        [1.0, 1.0]
    """

    backend = "single"

    def __init__(self) -> None:
        super().__init__(0, 1, 0)

    def _iallreduce(self, send: np.ndarray, recv: np.ndarray, op: str) -> Request:
        recv[...] = send
        return Request()

    _ireduce_scatter = _iallreduce

    def _iallgather(self, send: np.ndarray, recv: np.ndarray) -> Request:
        recv.reshape(-1)[...] = send.reshape(-1)
        return Request()

    def _ibcast(self, buffer: np.ndarray, src: int) -> Request:
        return Request()

    def barrier(self) -> None:
        pass

    def all_gather_object(self, obj: Any) -> list:
        return [obj]


# Half types travel as f32 (MPI has none), bools as bytes (max: any, min: all).
_WIRE = {"float16": np.float32, "bfloat16": np.float32, "bool": np.uint8}


def _host(tensor: Tensor) -> np.ndarray:
    array = tensor.detach().numpy()
    return array if array.flags.c_contiguous else array.copy(order="C")  # (ascontiguousarray makes 0-d 1-d)


def _reduce_buffer(tensor: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """The tensor on the host, and the buffer it is reduced in."""
    array = _host(tensor)
    wire = _WIRE.get(array.dtype.name)
    return array, (array.astype(wire, order="C") if wire is not None else array)


def _wire_op(op: str) -> str:
    return "sum" if op == "mean" else op


def _bytes(array: np.ndarray) -> np.ndarray:
    return array.reshape(-1).view(np.uint8)


def _tensor(array: np.ndarray, like: Tensor) -> Tensor:
    return from_numpy(np.asarray(array), device=like.device)  # (0-d arithmetic gives NumPy scalars)
