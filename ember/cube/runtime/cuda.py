"""The CUDA runtime: cube kernels rendered to CUDA C, compiled by NVRTC, run with the driver API.

One `CudaRuntime` per GPU: it uses the device's primary context (shared with PyTorch and CuPy), made
current on the calling thread before each operation; every copy and launch is queued in order on its
one stream; device memory comes from a `MemoryPool` of stream-ordered pages; host <-> device copies go
through pinned memory. A launch:

    bind arguments -> KernelFunction.specialize -> optimize -> targets/cuda.render -> nvrtc.compile_cuda
    (disk cache) -> cuModuleLoadData -> cuLaunchKernel(grid = CubeCount, block = CubeDim, dynamic shared)

Arguments are `CudaArray`s (device memory, as they are), NumPy arrays (copied to the device for the
launch, back when the kernel writes them), or scalars; each array is two kernel parameters: a pointer
to its first element and its element count (`len()` in the kernel).

Launches are asynchronous: `synchronize()` waits, and errors from a kernel (a bad address) surface
there. Driver errors raise `CudaError` naming the call and, for launches, the kernel and its launch
shape; launch shapes the device cannot run raise `CudaLaunchError` before anything is queued (why
the pages are stream-ordered: docs/cuda.md, "The runtime").

Example:
    >>> rt = cuda_runtime()
    >>> x = rt.to_device(np.arange(1000, dtype=np.float32)); y = rt.empty(1000, np.float32)
    >>> rt.launch(scale, CubeCount(4), CubeDim(256), (x, y, 2.0), {})
    >>> y.numpy()[:3]
    array([0., 2., 4.], dtype=float32)
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import DeviceError, DeviceUnavailableError, OutOfMemoryError
from ...limits import note_device_memory
from .. import ir
from ..lang import CubeCount, CubeDim, KernelError
from ..passes import optimize
from ..targets import cuda as cuda_target
from .memory_pool import MemoryPool, MemoryStats
from .nvrtc import INSTALL, compile_cuda
from .arguments import DeviceArray, Specializing, check_array, check_count, host_bounds
from .base import Runtime
from .host import host_span
from .launches import Launch, LaunchRecorder

OUT_OF_MEMORY = 2  # CUDA_ERROR_OUT_OF_MEMORY
STAGING = 64 << 20  # bytes of pinned host memory used per step of a host <-> device copy
UPLOAD_SLOTS, UPLOAD_SLOT = 16, 64 << 10  # pinned slots for small host -> device copies (no stream wait)
CONSTANT_BYTES, CONSTANTS = 1024, 4096  # small read-only NumPy arguments kept on the device, by value
# Scalar parameters as targets/cuda.py declares them (PARAM): f16/bf16 as f32, bool as one byte; each
# in an 8-byte slot of a kernel's `ParameterBlock` (the struct format, and the ctypes type that wraps
# out-of-range values as C does).
_SCALAR_SLOTS = {"f64": ("d", ctypes.c_double), "f32": ("f4x", ctypes.c_float), "f16": ("f4x", ctypes.c_float),
                 "bf16": ("f4x", ctypes.c_float), "i64": ("q", ctypes.c_int64), "i32": ("i4x", ctypes.c_int32),
                 "i16": ("h6x", ctypes.c_int16), "i8": ("b7x", ctypes.c_int8), "u8": ("B7x", ctypes.c_uint8),
                 "u32": ("I4x", ctypes.c_uint32), "u64": ("Q", ctypes.c_uint64), "bool": ("?7x", ctypes.c_uint8)}


class CudaError(DeviceError):
    """A CUDA driver call failed; the message names the call, the driver's error and the kernel."""


class CudaLaunchError(CudaError):
    """A launch shape (cube count, cube dim, shared memory) beyond what the device can run."""


class CudaOutOfMemoryError(CudaError, OutOfMemoryError):
    """The device has no memory left for an allocation, even after the pool gave back its cached pages
    (an ember `OutOfMemoryError`, so a `MemoryError` too)."""


def driver_module():
    """`cuda.bindings.driver`, or DeviceUnavailableError naming the extra that installs it."""
    try:
        from cuda.bindings import driver
    except ImportError:
        raise DeviceUnavailableError(f"the CUDA runtime needs cuda-bindings: {INSTALL}") from None
    return driver


def cuda_available() -> tuple[bool, str]:
    """(True, "") when cuda-bindings, a driver and at least one GPU are here, else (False, why)."""
    try:
        driver = driver_module()
        check(driver, driver.cuInit(0), "cuInit")
        _, count = check(driver, driver.cuDeviceGetCount(), "cuDeviceGetCount")
    except DeviceUnavailableError as e:
        return False, str(e)
    except Exception as e:  # no libcuda.so (no driver), or a driver/bindings mismatch
        return False, f"the CUDA driver cannot be used: {str(e).strip()[:300]}"
    if count == 0:
        return False, "the CUDA driver sees no GPU"
    return True, ""


def _memory_pools(driver, device) -> bool:
    """Whether `device` has stream-ordered allocation (cuMemAllocAsync; CUDA 11.2+ on most GPUs)."""
    attr = getattr(driver.CUdevice_attribute, "CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED", None)
    if attr is None or not hasattr(driver, "cuMemAllocAsync"):
        return False
    status, value = driver.cuDeviceGetAttribute(attr, device)
    return not int(status) and bool(value)


def check(driver, result, call: str, context: str = ""):
    """`result` (a driver call's tuple) when its status is CUDA_SUCCESS, else CudaError.

    Example:
        >>> _, ptr = check(driver, driver.cuMemAlloc(1024), "cuMemAlloc")
    """
    status = result[0] if isinstance(result, tuple) else result
    if int(status) == 0:
        return result
    _, name = driver.cuGetErrorName(status)
    _, text = driver.cuGetErrorString(status)
    name = name.decode() if isinstance(name, bytes) else str(name)
    text = text.decode() if isinstance(text, bytes) else str(text)
    message = f"{call} failed: {name} ({text})"
    if context:
        message += f" {context}"
    if name in ("CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "CUDA_ERROR_NO_BINARY_FOR_GPU", "CUDA_ERROR_INVALID_PTX"):
        message += "; NVRTC is newer than the driver or built for another GPU: update the driver or " \
                   "install the nvidia-cuda-nvrtc matching it"
    raise CudaError(message)


def launch_context(name: str, count: CubeCount, dim: CubeDim, shared: int) -> str:
    return (f"in kernel {name} launched with CubeCount({count.x}, {count.y}, {count.z}) x "
            f"CubeDim({dim.x}, {dim.y}, {dim.z}), {shared} bytes of shared memory")


@dataclass(frozen=True)
class DeviceLimits:
    """What one launch may ask of a device (CUDA's limits for compute capability 7.0 and later)."""

    max_units: int = 1024
    max_dim: tuple = (1024, 1024, 64)
    max_count: tuple = (2**31 - 1, 65535, 65535)
    max_shared: int = 48 << 10  # without opt-in; with it, more on recent GPUs

    @staticmethod
    def query(driver, device) -> "DeviceLimits":
        attr = driver.CUdevice_attribute

        def get(name: str) -> int:
            return check(driver, driver.cuDeviceGetAttribute(getattr(attr, f"CU_DEVICE_ATTRIBUTE_{name}"), device),
                         "cuDeviceGetAttribute")[1]

        return DeviceLimits(get("MAX_THREADS_PER_BLOCK"),
                            tuple(get(f"MAX_BLOCK_DIM_{a}") for a in "XYZ"),
                            tuple(get(f"MAX_GRID_DIM_{a}") for a in "XYZ"),
                            get("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"))


def check_launch(name: str, count: CubeCount, dim: CubeDim, shared: int, limits: DeviceLimits) -> None:
    """CudaLaunchError naming the kernel when `count` x `dim` with `shared` bytes cannot run."""
    problems = []
    if dim.total > limits.max_units:
        problems.append(f"a cube has {dim.total} units, the device allows {limits.max_units}")
    for axis, size, most in zip("xyz", (dim.x, dim.y, dim.z), limits.max_dim):
        if not 1 <= size <= most:
            problems.append(f"CubeDim.{axis} = {size} is outside 1..{most}")
    for axis, size, most in zip("xyz", (count.x, count.y, count.z), limits.max_count):
        if not 0 <= size <= most:
            problems.append(f"CubeCount.{axis} = {size} is outside 0..{most}")
    if shared > limits.max_shared:
        problems.append(f"it needs {shared} bytes of shared memory, the device has {limits.max_shared} per cube")
    if problems:
        raise CudaLaunchError(f"cannot launch {launch_context(name, count, dim, shared)}: {'; '.join(problems)}")


# ----------------------------------------------------------------------------------------------
# Device arrays and argument packing

class CudaArray(DeviceArray):
    """An array in device memory: a slice of the runtime's memory pool, given back when the array and
    all its views are dropped. NumPy's metadata (see `DeviceArray`); `ptr` is the address of element 0.

    Example:
        >>> a = rt.to_device(np.ones((2, 3), np.float32))
        >>> a.shape, a.numpy().sum(), a.T.ptr == a.ptr
        ((2, 3), 6.0, True)
    """

    __slots__ = ("memory", "_address")  # `memory`: the pool slice an owner gives back; None in a view

    def __init__(self, runtime: "CudaRuntime", shape: tuple, dtype, memory=None) -> None:
        super().__init__(runtime, shape, dtype)
        if memory is None and self.nbytes:
            memory = runtime.reserve(self.nbytes)
        self.memory = memory  # a slice given (`CudaRuntime.over`) or reserved here; None when empty
        self._address = int(self.memory.buffer) + self.memory.offset if self.memory is not None else 0

    def __del__(self) -> None:
        # Returning the slice is safe while kernels may still use it: the stream runs in order. The pool
        # takes it back at its next call (this may run inside a pool call: a lock here could deadlock).
        # __del__ rather than weakref.finalize: a finalizer is five more objects the garbage collector walks.
        memory = getattr(self, "memory", None)  # unset when reserve() raised in __init__
        if memory is not None:
            self.memory = None
            try:
                self.runtime.pool.free_later(memory)
            except AttributeError:  # interpreter shutdown: the pool is gone, and the device memory with it
                pass

    def _share(self, view: "CudaArray") -> None:
        view.memory, view._address = None, self._address

    @property
    def ptr(self) -> int:
        """The device address of element 0 (views share their owner's memory)."""
        return self._address + self.offset

    def numpy(self) -> np.ndarray:
        """A host copy (waits for the queued work that writes it); views are read through their strides."""
        lo, n = host_span(self)
        if not n:
            return np.empty(self.shape, self.dtype)
        raw = np.empty(n // self.itemsize, self.dtype)
        self.runtime.copy_to_host(self.ptr + lo, raw.ctypes.data, n)
        return np.lib.stride_tricks.as_strided(raw[-lo // self.itemsize:], self.shape, self.strides).copy()

    def free(self) -> None:
        """Give the memory back now (only the owner does; a view's memory lives as long as its owner)."""
        self.__del__()

    def __repr__(self) -> str:
        return f"CudaArray(shape={self.shape}, dtype={self.dtype}, device={self.runtime.device_index})"


class ParameterBlock:
    """The parameters of one compiled kernel, packed in place for `cuLaunchKernel`: an 8-byte slot per
    scalar and two per array (a pointer to its first element, then its i32 length: `len()` in the
    kernel), as targets/cuda.py declares them. The slots and the `void **` array pointing at them are
    made once per kernel; a launch writes its values with one `struct.pack_into` (the caller holds
    the runtime's lock from `pack` until the launch call returns: the driver copies the values then).

    Example:
        >>> block = ParameterBlock(kernel.params)
        >>> driver.cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, stream, block.pack([x_ptr, 1000, 2.0]), 0)
    """

    def __init__(self, params: list) -> None:
        slots = []
        for p in params:
            slots += [("Q", ctypes.c_uint64), ("i4x", ctypes.c_int32)] if isinstance(p, ir.Array) else \
                [_SCALAR_SLOTS[p.value.type.dtype.name]]
        self.format = struct.Struct("<" + "".join(f for f, _ in slots))
        self.storage = ctypes.create_string_buffer(max(8, self.format.size))
        base = ctypes.addressof(self.storage)
        self.slots = [(ctype, base + 8 * i) for i, (_, ctype) in enumerate(slots)]
        self.pointers = (ctypes.c_void_p * max(1, len(slots)))(*[address for _, address in self.slots])
        self.address = ctypes.addressof(self.pointers)

    def pack(self, values: list) -> int:
        """Write `values` (per slot: an array's pointer and length, a scalar) and return the address of the
        `void **` array. A value out of its slot's range wraps as in C (a u8 of -1 is 255)."""
        try:
            self.format.pack_into(self.storage, 0, *values)
        except (struct.error, OverflowError):
            if len(values) != len(self.slots):
                raise KernelError(f"{len(values)} parameter values for {len(self.slots)} slots") from None
            for (ctype, address), v in zip(self.slots, values):
                ctype.from_address(address).value = v
        return self.address


@dataclass
class CompiledCudaKernel:
    """A loaded kernel: its function handle and what a launch needs to marshal arguments."""

    function: object
    module: object
    name: str
    params: list
    written: list       # per parameter: does the kernel store to (or atomically update) it?
    shared: int         # bytes of dynamic shared memory per cube
    source: str
    dim: CubeDim        # the cube shape it was compiled for
    block: ParameterBlock | None = None  # where launches pack their parameters
    fits: bool = False  # `dim` and `shared` are within the device's limits (a launch checks only its count)


# ----------------------------------------------------------------------------------------------
# The runtime

class CudaRuntime(Specializing, LaunchRecorder, Runtime):
    """Compiles cube kernels to CUDA and runs them on GPU `device` (see the module docstring)."""

    ARRAY = CudaArray
    target = "cuda"
    NOTES_ALLOCATIONS = True  # `empty` notes its arrays for `record_launches` (scratch of a replayed step)
    records_launches = True
    graphs = True
    dtypes = frozenset(("f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "u8", "bool"))
    """The dtypes its kernels hold (names): all of ember's (f16/bf16 computed in f32)."""

    def __init__(self, device: int = 0, driver=None, cache_dir: Path | str | None = None) -> None:
        self.driver = driver if driver is not None else driver_module()
        d = self.driver
        check(d, d.cuInit(0), "cuInit")
        self.device_index = device
        _, self.device = check(d, d.cuDeviceGet(device), f"cuDeviceGet({device})")
        attr = d.CUdevice_attribute
        major = check(d, d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.device),
                      "cuDeviceGetAttribute")[1]
        minor = check(d, d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.device),
                      "cuDeviceGetAttribute")[1]
        self.arch = 10 * major + minor
        raw = check(d, d.cuDeviceGetName(256, self.device), "cuDeviceGetName")[1]
        self.name = (raw.split(b"\0")[0].decode() if isinstance(raw, bytes) else str(raw)) or f"GPU {device}"
        self.adapter_name = f"{self.name} (CUDA device {device}, sm_{self.arch})"
        self.limits = DeviceLimits.query(d, self.device)
        # Tensors up to this GPU's memory pass the size check of the shape rules (`check_size`), even
        # where the host has less.
        note_device_memory(check(d, d.cuDeviceTotalMem(self.device), "cuDeviceTotalMem")[1])
        _, self.context = check(d, d.cuDevicePrimaryCtxRetain(self.device), "cuDevicePrimaryCtxRetain")
        self.activate()
        _, self.stream = check(d, d.cuStreamCreate(int(d.CUstream_flags.CU_STREAM_NON_BLOCKING)), "cuStreamCreate")
        self.pool = MemoryPool(self._allocate, self._release)
        self.stream_ordered = _memory_pools(d, self.device)
        """New pages from cuMemAllocAsync, given back with cuMemFreeAsync (see the module docstring)."""
        self._ordered: set = set()  # addresses of the pages made with cuMemAllocAsync
        self.cache_dir = cache_dir
        self._staging, self._staging_size = 0, 0
        self._slots: list = []  # [pinned address, event of its last copy or None] per upload slot
        self._next_slot = 0
        self._compiled: dict = {}
        self._by_call: dict = {}
        self._constants: OrderedDict = OrderedDict()
        self._captured: list | None = None  # arrays allocated (or layouts used) while a graph is captured
        self._keep = True  # whether the graph being captured keeps the arrays allocated meanwhile
        LaunchRecorder.__init__(self)
        self._lock = threading.RLock()
        self.lock = self._lock
        """Held while a graph is captured; launches, copies and `CudaGraph.replay` take it too, so another
        thread's work never lands in a graph being captured (backend/cube/fused/cuda_graphs.py holds it across a replay)."""

    # -- context, memory and copies -----------------------------------------------------------
    def activate(self) -> None:
        """Make this device's context current on the calling thread.

        Set on every call (it costs well under a microsecond): another runtime, PyTorch or CuPy may
        have made another GPU's context current on this thread since.
        """
        check(self.driver, self.driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def _allocate(self, nbytes: int):
        self.activate()  # only a new page needs the context: most arrays are slices of pages held
        # While a graph is captured, an async allocation would be the graph's own (freed with it).
        ordered = self.stream_ordered and self._captured is None
        call = "cuMemAllocAsync" if ordered else "cuMemAlloc"
        result = self.driver.cuMemAllocAsync(nbytes, self.stream) if ordered else self.driver.cuMemAlloc(nbytes)
        if int(result[0]) == OUT_OF_MEMORY:
            raise CudaOutOfMemoryError(f"{call}({nbytes}) failed: out of memory")
        pointer = check(self.driver, result, f"{call}({nbytes})")[1]
        if ordered:
            self._ordered.add(int(pointer))
        return pointer

    def reserve(self, nbytes: int):
        """A pool slice of `nbytes`. When the device is out of memory, the pool gives back every cached
        page and tries once more, with a page of just the size asked (not the adaptive page size); then
        CudaOutOfMemoryError says what was asked, reserved and in use."""
        try:
            return self.pool.reserve(nbytes)
        except CudaOutOfMemoryError:
            self.pool.cleanup()
        page_size, self.pool.fixed_page = self.pool.fixed_page, 1
        try:
            return self.pool.reserve(nbytes)
        except CudaOutOfMemoryError:
            st = self.pool.stats()
            raise CudaOutOfMemoryError(
                f"GPU {self.device_index} is out of memory: asked for {nbytes} bytes; ember's pool has "
                f"{st.reserved} bytes reserved, {st.in_use} in use (peak {st.peak_in_use}), after giving back "
                f"its cached pages; free some tensors (or other processes' memory)") from None
        finally:
            self.pool.fixed_page = page_size

    def _release(self, pointer) -> None:
        self.activate()
        if int(pointer) in self._ordered:  # queued after the work that reads the page: no wait
            self._ordered.discard(int(pointer))
            check(self.driver, self.driver.cuMemFreeAsync(pointer, self.stream), "cuMemFreeAsync")
        else:
            check(self.driver, self.driver.cuMemFree(pointer), "cuMemFree")

    def empty(self, shape, dtype) -> CudaArray:
        """An uninitialized device array (noted for an enclosing `record_launches` block)."""
        out = self._new(shape, dtype)
        self.allocated(out)
        return out

    def _new(self, shape, dtype) -> CudaArray:
        out = CudaArray(self, (shape,) if isinstance(shape, int) else shape, dtype)
        if self._captured is not None and self._keep:  # a graph being captured writes here on every replay
            self._captured.append(out)
        return out

    def over(self, memory, shape: tuple, dtype) -> CudaArray:
        """A C-contiguous array of `shape` owning `memory`, a pool slice this runtime reserved (given back
        when the array goes): how a replayed graph's outputs become arrays without a new reservation.

        Example:
            >>> a = rt.over(rt.reserve(24), (2, 3), np.float32)
        """
        return CudaArray(self, shape, dtype, memory)

    @staticmethod
    def memory_of(a: CudaArray):
        """The pool slice under `a` (its owner's for a view); None for an empty array."""
        return a.memory if a.owner is None else a.owner.memory

    def to_device(self, a: np.ndarray) -> CudaArray:
        """A device copy of `a` (C-contiguous, of `a`'s shape: a 0-d array stays 0-d), noting the bounds
        of integer data (`DeviceArray.bounds`). Host data: not noted as an allocation (a replayed step
        keeps it, as a constant)."""
        shape, a = np.shape(a), np.ascontiguousarray(a)  # ascontiguousarray makes 0-d arrays 1-d
        out = self._new(shape, a.dtype)
        self.copy_to_device(a.ctypes.data, out.ptr, a.nbytes)
        out.bounds = host_bounds(a)
        return out

    def _staging_buffer(self, nbytes: int) -> int:
        want = min(max(nbytes, 1 << 20), STAGING)
        if want > self._staging_size:
            if self._staging:
                check(self.driver, self.driver.cuMemFreeHost(self._staging), "cuMemFreeHost")
            self._staging = check(self.driver, self.driver.cuMemHostAlloc(want, 0), "cuMemHostAlloc")[1]
            self._staging_size = want
        return int(self._staging)

    def copy_to_device(self, host: int, device: int, nbytes: int) -> None:
        """Copy `nbytes` from host address `host` to device address `device` (through pinned memory).

        Up to `UPLOAD_SLOT` bytes go through one of `UPLOAD_SLOTS` pinned slots used in turn, each waiting
        only for its own last copy (an event): the host does not wait for the GPU's queue (an index array,
        a small constant mid-step). Larger copies go through the staging buffer and wait for the stream."""
        self.activate()
        with self._lock:
            self._refuse_in_capture("a copy from the host")
            if nbytes <= UPLOAD_SLOT and self._upload_small(host, device, nbytes):
                return
            staging = self._staging_buffer(nbytes)
            for start in range(0, nbytes, self._staging_size):
                n = min(self._staging_size, nbytes - start)
                ctypes.memmove(staging, host + start, n)
                check(self.driver, self.driver.cuMemcpyHtoDAsync(device + start, staging, n, self.stream),
                      "cuMemcpyHtoDAsync")
                self.synchronize()  # the staging buffer is reused by the next step

    def _upload_small(self, host: int, device: int, nbytes: int) -> bool:
        """Queue a copy of at most UPLOAD_SLOT bytes through the next pinned slot; False where the driver
        has no events (the caller then copies through the staging buffer)."""
        d = self.driver
        if not hasattr(d, "cuEventRecord"):
            return False
        if not self._slots:
            block = check(d, d.cuMemHostAlloc(UPLOAD_SLOTS * UPLOAD_SLOT, 0), "cuMemHostAlloc")[1]
            self._slots = [[int(block) + i * UPLOAD_SLOT, None] for i in range(UPLOAD_SLOTS)]
        slot = self._slots[self._next_slot]
        self._next_slot = (self._next_slot + 1) % UPLOAD_SLOTS
        if slot[1] is None:
            slot[1] = check(d, d.cuEventCreate(2), "cuEventCreate")[1]  # CU_EVENT_DISABLE_TIMING
        else:
            check(d, d.cuEventSynchronize(slot[1]), "cuEventSynchronize")  # its last copy is done
        ctypes.memmove(slot[0], host, nbytes)
        check(d, d.cuMemcpyHtoDAsync(device, slot[0], nbytes, self.stream), "cuMemcpyHtoDAsync")
        check(d, d.cuEventRecord(slot[1], self.stream), "cuEventRecord")
        return True

    def copy_to_host(self, device: int, host: int, nbytes: int) -> None:
        """Copy `nbytes` from device address `device` to host address `host` (waits for the stream)."""
        self.activate()
        with self._lock:
            self._refuse_in_capture("a copy to the host")
            staging = self._staging_buffer(nbytes)
            for start in range(0, nbytes, self._staging_size):
                n = min(self._staging_size, nbytes - start)
                check(self.driver, self.driver.cuMemcpyDtoHAsync(staging, device + start, n, self.stream),
                      "cuMemcpyDtoHAsync")
                self.synchronize()
                ctypes.memmove(host + start, staging, n)

    def copy(self, src: CudaArray, dst: CudaArray) -> None:
        """Queue a device-to-device copy of `src` into `dst` (same byte size)."""
        if src.nbytes != dst.nbytes:
            raise ValueError(f"cannot copy {src.nbytes} bytes into {dst.nbytes}")
        self.activate()
        self.recorded(NOT_REPLAYED, None, ())
        with self._lock:
            check(self.driver, self.driver.cuMemcpyDtoDAsync(dst.ptr, src.ptr, src.nbytes, self.stream),
                  "cuMemcpyDtoDAsync")

    def memory_stats(self, reset_peaks: bool = False) -> MemoryStats:
        """The pool's reserved and in-use bytes and their peaks."""
        return self.pool.stats(reset_peaks)

    def memory_cleanup(self) -> int:
        """Give every empty pool page back to the device (cuMemFree); returns the bytes released."""
        return self.pool.cleanup()

    def write_zeros(self, a: CudaArray) -> None:
        """Queue zeros over the bytes of `a` (a C-contiguous array this runtime made); recorded by
        `record_launches` as a `Memset` launch."""
        self.activate()
        self.recorded(MEMSET, None, (a,))
        if a.nbytes:
            with self._lock:
                check(self.driver, self.driver.cuMemsetD8Async(a.ptr, 0, a.nbytes, self.stream),
                      "cuMemsetD8Async")

    def synchronize(self) -> None:
        """Wait for everything queued on this device's stream (kernel errors surface here)."""
        self.activate()
        check(self.driver, self.driver.cuStreamSynchronize(self.stream), "cuStreamSynchronize",
              "(an error of an earlier asynchronous launch or copy may surface here)")

    def time(self, fn, repeat: int = 20, warmup: int = 3) -> float:
        """Milliseconds per call of `fn()` (which queues work on this runtime), timed with CUDA events."""
        d = self.driver
        self.activate()
        for _ in range(warmup):
            fn()
        start = check(d, d.cuEventCreate(0), "cuEventCreate")[1]
        end = check(d, d.cuEventCreate(0), "cuEventCreate")[1]
        try:
            check(d, d.cuEventRecord(start, self.stream), "cuEventRecord")
            for _ in range(repeat):
                fn()
            check(d, d.cuEventRecord(end, self.stream), "cuEventRecord")
            check(d, d.cuEventSynchronize(end), "cuEventSynchronize")
            return check(d, d.cuEventElapsedTime(start, end), "cuEventElapsedTime")[1] / repeat
        finally:
            d.cuEventDestroy(start)
            d.cuEventDestroy(end)

    # -- graphs ---------------------------------------------------------------------------------
    def capture(self, fn, warmup: bool = True, keep: bool = True) -> "CudaGraph":
        """A CUDA graph of what `fn()` queues on this runtime (launches, device copies), to `replay()`
        with one call and almost no host time.

        With `warmup`, `fn` runs once first (compiling its kernels and keeping its layouts on the
        device); then it runs under stream capture, holding `lock`. Replays read the arrays `fn` reads as
        they are at replay time (write new inputs into them, as with PyTorch's CUDA graphs) and write the
        arrays it allocated during the capture, which the graph keeps alive with the layouts it reads
        (`graph.result` is what the captured call returned; `graph.nbytes` what it pins). With `keep`
        false, the graph keeps only the layouts: the arrays `fn` allocated live and die as they did in
        the call, and the caller must own their memory again before each replay (the fusion plans'
        graphs do, through the pool's `trace`). A host copy or wait inside `fn` (a NumPy argument the
        kernel writes, a new NumPy input, `.numpy()`) cannot be captured: CudaError says so, and the
        stream leaves capture mode. Nothing runs until the first `replay()`.

        Example:
            >>> graph = rt.capture(lambda: elementwise.binary("add", x, y))
            >>> graph.replay(); graph.result.numpy()
        """
        if warmup:
            fn()
            self.synchronize()
        d = self.driver
        self.activate()
        # A page the pool gives up meanwhile is freed after the capture: cuMemFree is refused while the
        # stream captures, which left the pool's books and the device apart (a later free then failed).
        with self._lock, self.pool.deferring():
            self._captured, self._keep = [], keep
            check(d, d.cuStreamBeginCapture(self.stream, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED),
                  "cuStreamBeginCapture")
            try:
                result = fn()
            except BaseException:
                d.cuStreamEndCapture(self.stream)  # leave the stream usable
                raise
            finally:
                arrays, self._captured = self._captured, None
            _, graph = check(d, d.cuStreamEndCapture(self.stream), "cuStreamEndCapture",
                             "(the captured function waited on the host or copied from it: pass device arrays)")
        try:
            _, executable = check(d, d.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        except CudaError:
            d.cuGraphDestroy(graph)
            raise
        return CudaGraph(self, graph, executable, arrays, result)

    def _refuse_in_capture(self, what: str) -> None:
        if self._captured is not None:  # the copy would be recorded, not done: the data would never arrive
            raise CudaError(f"{what} cannot be captured in a CUDA graph (a new NumPy argument, or a read of "
                            f"a device value, inside the captured function)")

    # -- compiling ------------------------------------------------------------------------------
    def compile(self, kernel: ir.Kernel, dim: CubeDim) -> CompiledCudaKernel:
        """Optimize, render, compile (or load from the disk cache) and load one specialized kernel."""
        optimized = optimize(kernel)
        source = cuda_target.render(optimized, dim)
        name = cuda_target.entry_name(optimized)
        if os.environ.get("EMBER_DEBUG_KERNELS") == "1":
            print(f"// ---- cube kernel {kernel.name} (cube dim {dim}) ----\n{source}", file=sys.stderr)
        specific = cuda_target.uses_group_mma(optimized)
        if specific and self.arch != 90:
            raise CudaError(f"kernel {name} uses plane-group products (wgmma), which only sm_90 devices run; "
                            f"this device is sm_{self.arch}")
        binary = compile_cuda(source, name, self.arch, cache_dir=self.cache_dir, specific=specific)
        d = self.driver
        self.activate()
        image = ctypes.create_string_buffer(binary.data)  # NUL-terminated, as PTX must be
        _, module = check(d, d.cuModuleLoadData(ctypes.addressof(image)), "cuModuleLoadData",
                          f"for kernel {name} ({binary.kind} for sm_{self.arch})")
        _, function = check(d, d.cuModuleGetFunction(module, name.encode()), "cuModuleGetFunction")
        shared = cuda_target.shared_bytes(optimized)
        if shared > 48 << 10:  # beyond the default, a cube must opt in to more shared memory
            check(d, d.cuFuncSetAttribute(
                function, d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared),
                "cuFuncSetAttribute", f"for kernel {name} ({shared} bytes of shared memory)")
        stored = {ir.written_array(s) for s in ir.walk(optimized.body) if isinstance(s, ir.Instr)}
        try:
            check_launch(name, CubeCount(1), dim, shared, self.limits)
            fits = True
        except CudaLaunchError:
            fits = False  # every launch raises, naming the kernel
        return CompiledCudaKernel(function, module, name, optimized.params,
                                  [p in stored for p in optimized.params], shared, source, dim,
                                  ParameterBlock(optimized.params), fits)

    def compile_ir(self, kernel: ir.Kernel, dim: CubeDim) -> CompiledCudaKernel:
        """Compile IR built directly (a fused kernel from `ir.Builder`), remembered by its hash.

        Example:
            >>> rt.run(rt.compile_ir(builder.kernel, CubeDim(256)), CubeCount(4), (x, y))
        """
        key = ("ir", kernel.hash(), dim)
        with self._lock:
            if key not in self._compiled:
                self._compiled[key] = self.compile(kernel, dim)
            return self._compiled[key]

    # -- launching ------------------------------------------------------------------------------
    def launch(self, kfn, count: CubeCount, dim: CubeDim, args: tuple, comptime: dict) -> None:
        """Queue `kfn` over `count` cubes of shape `dim`.

        CudaArrays are used in place; NumPy arrays are copied to the device and, when the kernel
        writes them, back (this call then waits for the kernel).
        """
        check_count(kfn, args)
        if count.total == 0:
            return
        self.run(self._compiled_for(kfn, dim, args, comptime), count, args)

    def run(self, compiled: CompiledCudaKernel, count: CubeCount, args: tuple) -> None:
        """Queue a compiled kernel on CudaArrays, NumPy arrays and scalars, in parameter order."""
        params = compiled.params
        if len(args) != len(params):
            raise KernelError(f"{compiled.name} takes {len(params)} arguments, got {len(args)}")
        if count.total == 0:
            return
        dim, most = compiled.dim, self.limits.max_count
        if not (compiled.fits and 0 < count.x <= most[0] and 0 < count.y <= most[1] and 0 < count.z <= most[2]):
            check_launch(compiled.name, count, dim, compiled.shared, self.limits)
        values, staged = [], []  # staged: (host array, its device copy, parameter index)
        try:
            for i, a in enumerate(args):
                if not isinstance(params[i], ir.Array):
                    values.append(a)
                elif type(a) is CudaArray and a.size < 2**31:  # the common case, inlined from _argument
                    values += (a._address + a.offset, a.size)
                else:
                    values += self._argument(compiled, i, a, staged)
            self._launch(compiled, count, values)
            self.recorded(compiled, count, args)
            for a, dev, i in staged:
                if compiled.written[i]:
                    lo, n = host_span(a)
                    self.copy_to_host(dev.ptr, a.ctypes.data + lo, n)
        finally:
            for _, dev, _ in staged:
                dev.free()

    def _launch(self, compiled: CompiledCudaKernel, count: CubeCount, values: list) -> None:
        """Queue `compiled` with its parameter slots' `values` (`ParameterBlock.pack`)."""
        dim = compiled.dim
        self.activate()
        with self._lock:
            status = self.driver.cuLaunchKernel(
                compiled.function, count.x, count.y, count.z, dim.x, dim.y, dim.z, compiled.shared,
                self.stream, compiled.block.pack(values), 0)
        if int(status[0]):
            check(self.driver, status, "cuLaunchKernel", launch_context(compiled.name, count, dim, compiled.shared))

    def bind(self, launch: Launch, open_slots) -> "BoundCudaLaunch | None":
        """`launch` (recorded by `record_launches`) marshalled once, its arrays at `open_slots` left to fill
        in at each replay: device arrays of the recorded ones' layouts (a recorded library call, such as
        `cublas.Gemm`, binds itself). The other arguments are kept as
        they were (a NumPy layout array as its device constant). None when the launch cannot be
        replayed so: an open slot not a device array, or a NumPy argument the kernel writes or that is
        too large to keep as a constant.

        Example:
            >>> with rt.record_launches() as launches:
            ...     rt.run(compiled, CubeCount(4), (x, y, 2.0))
            >>> rt.bind(launches[0], open_slots=(0, 1)).replay((x2, y2))
        """
        own = getattr(launch.compiled, "bind", None)  # a recorded library call (cublas.Gemm)
        if own is not None:
            return own(launch, tuple(open_slots))
        return BoundCudaLaunch.of(self, launch, tuple(open_slots))

    @staticmethod
    def address(a) -> int | None:
        """The device address of `a` when it is one of this runtime's arrays, else None."""
        return a._address + a.offset if isinstance(a, CudaArray) else None

    @staticmethod
    def shares_memory(a: CudaArray, b: CudaArray) -> bool:
        """Whether `a` and `b` are views of one allocation (a pool slice)."""
        return a._address == b._address

    def _compiled_for(self, kfn, dim: CubeDim, args: tuple, comptime: dict) -> CompiledCudaKernel:
        """`prepare`, remembered by what the call site passes (its arrays' dtypes, its comptime values
        in the order given), which skips re-deriving the specialization on every launch."""
        try:
            key = (kfn, dim, tuple(getattr(a, "dtype", None) for a in args), tuple(comptime.items()))
            found = self._by_call.get(key)
        except TypeError:  # an unhashable comptime value: the slow path
            return self.prepare(kfn, dim, args, comptime)
        if found is None:
            found = self._by_call[key] = self.prepare(kfn, dim, args, comptime)
        return found

    def _argument(self, compiled: CompiledCudaKernel, i: int, a, staged: list):
        p = compiled.params[i]
        if not isinstance(p, ir.Array):
            return a
        check_array(compiled.name, p, a, compiled.written[i])
        if isinstance(a, CudaArray):
            return a.ptr, a.size
        if not compiled.written[i] and a.nbytes <= CONSTANT_BYTES and a.flags.c_contiguous:
            return self._constant(a).ptr, a.size
        lo, n = host_span(a)
        dev = self.empty(n, np.uint8)
        staged.append((a, dev, i))
        if n:
            self.copy_to_device(a.ctypes.data + lo, dev.ptr, n)
        return (dev.ptr - lo if n else 0), a.size


    def _constant(self, a: np.ndarray) -> CudaArray:
        """A device copy of a small array a kernel only reads (the library's shape and stride layouts),
        kept by value: a layout seen before costs no copy and no wait (the `CONSTANTS` most recent)."""
        key = (a.dtype.str, a.shape, a.tobytes())
        with self._lock:
            found = self._constants.get(key)
            if found is not None:
                self._constants.move_to_end(key)
            else:
                found = self._constants[key] = self.to_device(a)
                if len(self._constants) > CONSTANTS:
                    self._constants.popitem(last=False)  # freed once the stream is past its last use
            if self._captured is not None:  # a graph reads it on every replay: keep it past an eviction
                self._captured.append(found)
            return found


class BoundCudaLaunch:
    """A recorded launch with its parameter values made once (`CudaRuntime.bind`): a replay writes the
    addresses of the arrays given for its open slots and queues the kernel, skipping the argument checks
    and the specialization lookup of `run` (the arrays must have the recorded ones' layouts).

    Example:
        >>> bound = rt.bind(launch, open_slots=(0, 1))
        >>> bound.replay((x2, y2))
    """

    __slots__ = ("runtime", "compiled", "count", "values", "open", "keep")

    def __init__(self, runtime: CudaRuntime, compiled: CompiledCudaKernel, count: CubeCount, values: list,
                 open_values: tuple, keep: list) -> None:
        self.runtime, self.compiled, self.count = runtime, compiled, count
        self.values, self.open, self.keep = values, open_values, keep  # keep: the constants' device arrays

    @staticmethod
    def of(runtime: CudaRuntime, launch: Launch, open_slots: tuple) -> "BoundCudaLaunch | None":
        compiled, args = launch.compiled, launch.args
        values, keep, where = [], [], {}
        for i, (p, a) in enumerate(zip(compiled.params, args)):
            if not isinstance(p, ir.Array):
                values.append(a)
                continue
            if not isinstance(a, CudaArray):
                if i in open_slots or compiled.written[i] or not isinstance(a, np.ndarray) or \
                        a.nbytes > CONSTANT_BYTES or not a.flags.c_contiguous:
                    return None
                a = runtime._constant(a)
            where[i] = len(values)
            values += (a._address + a.offset, a.size)
            if i not in open_slots:
                keep.append(a)
        return BoundCudaLaunch(runtime, compiled, launch.count, values, tuple(where[i] for i in open_slots), keep)

    def replay(self, arrays) -> None:
        """Queue the kernel with `arrays[k]` (device arrays) in open slot `k`."""
        values = self.values.copy()
        for k, a in zip(self.open, arrays):
            values[k] = a._address + a.offset
        self.runtime._launch(self.compiled, self.count, values)


class Memset:
    """`write_zeros` as `record_launches` records it (a `Launch` whose one arg is the array zeroed), so that
    a replayed step zeroes its fresh array as the recorded run did."""

    written = (True,)

    @staticmethod
    def bind(launch: Launch, open_slots) -> "BoundMemset | None":
        """A replay on the array given at each replay; None when the array is not an open slot (a
        replayed step writes only its own arrays)."""
        return BOUND_MEMSET if open_slots else None


class BoundMemset:
    """A recorded memset, replayed on the array given for its one open slot."""

    @staticmethod
    def replay(arrays) -> None:
        arrays[0].runtime.write_zeros(arrays[0])


MEMSET, BOUND_MEMSET = Memset(), BoundMemset()


class NotReplayed:
    """A device-to-device copy as `record_launches` records it: a step that copies is not replayed (it
    runs afresh each time), since a replay would skip the copy."""

    written = ()  # nothing a replayed step could rebind

    @staticmethod
    def bind(launch: Launch, open_slots) -> None:
        return None


NOT_REPLAYED = NotReplayed()


class CudaGraph:
    """A captured sequence of work on one runtime's stream (see `CudaRuntime.capture`)."""

    def __init__(self, runtime: CudaRuntime, graph, executable, arrays: list, result) -> None:
        self.runtime = runtime
        self.result = result
        self._arrays = arrays  # what the replays write and the layouts they read: kept until the graph goes
        self.nbytes = sum(a.nbytes for a in {id(a): a for a in arrays}.values())
        """Bytes of device memory the graph pins (the arrays allocated while it was captured)."""
        self._executable = executable
        self._finalizer = weakref.finalize(self, _destroy_graph, runtime.driver, graph, executable)

    def replay(self) -> None:
        """Queue the whole captured sequence again (asynchronous, like a launch)."""
        rt = self.runtime
        rt.activate()
        if not self._finalizer.alive:
            raise CudaError("this CUDA graph was closed")
        rt.recorded(NOT_REPLAYED, None, ())  # an enclosing `record_launches` cannot replay a graph's kernels
        with rt.lock:
            check(rt.driver, rt.driver.cuGraphLaunch(self._executable, rt.stream), "cuGraphLaunch")

    def close(self) -> None:
        """Destroy the graph now (after the stream is past its last replay) and let its arrays go."""
        self.runtime.synchronize()
        self._finalizer()
        self._arrays = []


def _destroy_graph(driver, graph, executable) -> None:
    driver.cuGraphExecDestroy(executable)
    driver.cuGraphDestroy(graph)


_runtimes: dict = {}
_runtimes_lock = threading.Lock()


def cuda_runtime(device: int = 0) -> CudaRuntime:
    """The process-wide runtime of GPU `device` (created on first use)."""
    with _runtimes_lock:
        if device not in _runtimes:
            ok, why = cuda_available()
            if not ok:
                raise DeviceUnavailableError(f"the CUDA cube runtime is unavailable: {why}")
            _runtimes[device] = CudaRuntime(device)
        return _runtimes[device]
