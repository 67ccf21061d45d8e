"""The NCCL backend: collectives between CUDA devices through libnccl (the `nvidia-nccl-cu13` wheel, or
a system libnccl.so.2), called with ctypes, on ember's CUDA stream.

Each collective reads the input's device memory and writes a new array of ember's memory pool, queued
on the same stream as ember's kernels: it is ordered after the kernels that wrote its input and before
those that read its output, with no host synchronization (`async_op=True` costs nothing more). The
communicator is made by `ncclCommInitRank`; its unique id comes from rank 0 through MPI when the ranks
run under mpirun, else through the TCP rendezvous at MASTER_ADDR:MASTER_PORT (`rendezvous.py`).
"mean" is NCCL's ncclAvg; bool travels as u8 (max: any, min: all); i16 has no NCCL type and raises.

Unverified on a GPU (no GPU was available when this was written): docs/distributed.md says so.

Example:
    >>> group = ember.distributed.init(device=ember.Device.cuda(0))   # under ember launch
    >>> group.all_reduce(ember.ones(4, device=ember.Device.cuda(0))).tolist()
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import importlib.util
import os
import pickle
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..api.creation import from_numpy
from ..device import Device
from ..errors import DistributedError
from ..ops.primitive import Aval
from ..tensor import Tensor
from .group import ProcessGroup, Work

UNIQUE_ID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES
OPS = {"sum": 0, "max": 2, "min": 3, "mean": 4}  # ncclSum, ncclMax, ncclMin, ncclAvg
TYPES = {"i8": 0, "u8": 1, "bool": 1, "i32": 2, "i64": 4, "f16": 6, "f32": 7, "f64": 8, "bf16": 9}


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


@functools.cache
def load_nccl() -> ctypes.CDLL:
    """libnccl with the prototypes used here, or a `DistributedError` naming the extra to install."""
    candidates = []
    spec = importlib.util.find_spec("nvidia.nccl") if importlib.util.find_spec("nvidia") else None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        candidates.append(str(Path(folder) / "lib" / "libnccl.so.2"))
    candidates += [ctypes.util.find_library("nccl") or "", "libnccl.so.2"]
    errors = []
    for path in filter(None, candidates):
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            errors.append(str(e))
    else:
        raise DistributedError("the NCCL backend needs libnccl: pip install 'ember[nccl]' (the nvidia-nccl-cu13 "
                               f"wheel) on a machine with CUDA GPUs; tried {candidates} ({'; '.join(errors)})")
    p, size, i32 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
    lib.ncclGetErrorString.restype, lib.ncclGetErrorString.argtypes = ctypes.c_char_p, [i32]
    for name, args in (("ncclGetUniqueId", [ctypes.POINTER(UniqueId)]),
                       ("ncclCommInitRank", [ctypes.POINTER(p), i32, UniqueId, i32]),
                       ("ncclAllReduce", [p, p, size, i32, i32, p, p]),
                       ("ncclReduceScatter", [p, p, size, i32, i32, p, p]),
                       ("ncclAllGather", [p, p, size, i32, p, p]),
                       ("ncclBroadcast", [p, p, size, i32, i32, p, p]),
                       ("ncclCommDestroy", [p]), ("ncclCommAbort", [p])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = i32, args
    return lib


def check(lib: ctypes.CDLL, result: int, call: str) -> None:
    if result != 0:
        raise DistributedError(f"{call} failed: NCCL error {result} ({lib.ncclGetErrorString(result).decode()})")


def new_unique_id() -> bytes:
    """A fresh NCCL unique id (rank 0 makes it; every rank initializes its communicator with it)."""
    lib = load_nccl()
    uid = UniqueId()
    check(lib, lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
    return bytes(uid.internal)


class NcclGroup(ProcessGroup):
    """`size` ranks, one CUDA device each, joined by the NCCL id `unique_id` (see the module docs)."""

    backend = "nccl"

    def __init__(self, rank: int, size: int, local_rank: int, device: Device, unique_id: bytes) -> None:
        if device.inner.kind != "cuda":
            raise DistributedError(f"the NCCL backend runs on CUDA devices, got {device!r}; use backend='mpi'")
        super().__init__(rank, size, local_rank)
        self.lib, self.device = load_nccl(), device.inner
        self._fused, self.runtime = _runtime_of(self.device)
        self.runtime.activate()
        uid = UniqueId()
        uid.internal = unique_id
        self.comm = ctypes.c_void_p()
        check(self.lib, self.lib.ncclCommInitRank(ctypes.byref(self.comm), size, uid, rank), "ncclCommInitRank")

    # ---- collectives: the output is a new pool array, the call queued on ember's stream ----------
    def _all_reduce(self, tensor: Tensor, op: str) -> Work:
        return self._run(tensor, tensor.shape, lambda src, dst, n, t: self.lib.ncclAllReduce(
            src, dst, n, t, OPS[op], self.comm, self._stream()), "ncclAllReduce", op)

    def _reduce_scatter(self, tensor: Tensor, op: str) -> Work:
        shape = (tensor.shape[0] // self.size, *tensor.shape[1:])
        return self._run(tensor, shape, lambda src, dst, n, t: self.lib.ncclReduceScatter(
            src, dst, n // self.size, t, OPS[op], self.comm, self._stream()), "ncclReduceScatter", op)

    def _all_gather(self, tensor: Tensor) -> Work:
        shape = (self.size * tensor.shape[0], *tensor.shape[1:]) if tensor.shape else (self.size,)
        return self._run(tensor, shape, lambda src, dst, n, t: self.lib.ncclAllGather(
            src, dst, n, t, self.comm, self._stream()), "ncclAllGather", None)

    def _broadcast(self, tensor: Tensor, src_rank: int) -> Work:
        return self._run(tensor, tensor.shape, lambda src, dst, n, t: self.lib.ncclBroadcast(
            src, dst, n, t, src_rank, self.comm, self._stream()), "ncclBroadcast", None)

    def _run(self, tensor: Tensor, out_shape: tuple, call: Callable, name: str, op: str | None) -> Work:
        dtype = tensor.dtype.name
        if dtype not in TYPES:
            raise DistributedError(f"{name}: NCCL has no type for {dtype}; cast the tensor (known: {sorted(TYPES)})")
        if tensor.device.inner is not self.device:
            raise DistributedError(f"{name}: this NCCL group runs on {self.device!r}, the tensor is on "
                                   f"{tensor.device!r}; move it first")
        source = self._array(tensor)
        out = self.runtime.empty(out_shape, source.dtype)
        self.runtime.activate()
        check(self.lib, call(source.ptr, out.ptr, int(np.prod(tensor.shape, dtype=np.int64)), TYPES[dtype]), name)
        aval = Aval(tuple(out_shape), tensor.dtype)
        from ..backend.fusion import LazyHandle  # lazy: import ember loads no backend
        result = Tensor._make(self.device, LazyHandle.concrete(out, aval) if self._fused else out, aval)
        # The input may be freed now: the pool hands its memory out again only to later work on the stream.
        return Work(lambda: result if tensor.device is self.device else result.to(tensor.device))

    def _array(self, tensor: Tensor) -> Any:
        plain = tensor.inner() if tensor.device.is_autodiff else tensor
        backend = plain.device.backend
        array = backend.data(plain._handle) if self._fused else plain._handle
        return array if array.flags.c_contiguous else array.copy()

    def _stream(self) -> ctypes.c_void_p:
        return ctypes.c_void_p(int(self.runtime.stream))

    # ---- host-side helpers ------------------------------------------------------------------------
    def barrier(self) -> None:
        self.all_reduce(from_numpy(np.zeros(1, np.float32), device=self.device))
        self.runtime.synchronize()

    def all_gather_object(self, obj: Any) -> list:
        data = np.frombuffer(pickle.dumps(obj), np.uint8)
        sizes = self.all_gather(from_numpy(np.array([data.size], np.int64), device=self.device)).numpy()
        padded = np.zeros(int(sizes.max()), np.uint8)
        padded[:data.size] = data
        gathered = self.all_gather(from_numpy(padded, device=self.device)).numpy().reshape(self.size, -1)
        return [pickle.loads(gathered[r, :int(sizes[r])].tobytes()) for r in range(self.size)]

    def abort(self, code: int = 1) -> None:
        if self.comm:
            self.lib.ncclCommAbort(self.comm)
            self.comm = ctypes.c_void_p()
        os._exit(code)

    def destroy(self) -> None:
        if self.comm:
            self.runtime.synchronize()
            check(self.lib, self.lib.ncclCommDestroy(self.comm), "ncclCommDestroy")
            self.comm = ctypes.c_void_p()


def _runtime_of(device: Device) -> tuple[bool, Any]:
    """(whether the device's stack is fused, its CUDA runtime) as `ember.api.dlpack` finds them."""
    from ..backend.fusion import Fusion  # lazy: import ember loads no backend
    backend = device.backend
    fused = isinstance(backend, Fusion)
    return fused, (backend.inner if fused else backend).runtime
