"""The runtime protocol: what every cube runtime (CPU, wgpu, CUDA) provides to the layers above it.

A runtime compiles a kernel's IR for one target (a renderer in `ember/cube/targets`), launches it on
its own arrays (`ARRAY`: NumPy arrays on the CPU, a `DeviceArray` type on a device), allocates and
copies them, and says what its kernels can hold (`dtypes`) and which errors mean "not here"
(`TARGET_ERRORS`, `LIMIT_ERRORS`). The kernel library (`ember.kernels`), the Cube backend and the
fusion decorator use these members only; none of them asks a runtime what it has.

`Runtime` is an abstract base class rather than a `typing.Protocol`: the optional parts
(record/replay with `records_launches`, CUDA graphs with `graphs`) default to "not supported", so a new
runtime writes only what it has. docs/cube.md, "The runtime protocol", lists every member and what
each runtime gives.

Example:
    >>> rt = cpu_runtime()
    >>> isinstance(rt, Runtime), rt.target, "f32" in rt.dtypes
    (True, 'cpu', True)
    >>> rt.to_host(rt.to_device(np.ones(2, np.float32)))
    array([1., 1.], dtype=float32)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from typing import ClassVar, Sequence

import numpy as np

from .memory_pool import MemoryStats


class Runtime(ABC):
    """One cube target on one device (see the module docstring for the members a port writes)."""

    target: ClassVar[str]
    """The renderer its kernels go through, the name kernels branch on: "cpu" (C), "wgsl", "cuda"."""
    ARRAY: ClassVar[type]
    """The array type its kernels read and write in place (what `launch` routes by and `empty` makes)."""
    dtypes: frozenset
    """Names of the dtypes its kernels hold (`ember.dtype` names; the backend refuses others)."""
    adapter_name: str
    """Where its kernels run, in words (errors name it)."""

    TARGET_ERRORS: ClassVar[tuple] = ()
    """Errors raised for a kernel the target cannot render: the backend runs the op's reference instead."""
    LIMIT_ERRORS: ClassVar[tuple] = ()
    """Errors raised for a kernel this device cannot run (too large): fusion runs such a block op by op."""
    UNFUSED_DTYPES: ClassVar[frozenset] = frozenset()
    """Dtype names whose values a fused chain would compute differently (emulated narrow ints)."""
    records_launches: ClassVar[bool] = False
    """Whether `record_launches`, `bind` and `address` work (the fusion plans then replay launches)."""
    graphs: ClassVar[bool] = False
    """Whether it captures graphs (`capture`, `over`, `memory_of`, `pool`, `lock`: CUDA)."""

    # ---- compiling and launching ------------------------------------------------------------------
    @abstractmethod
    def compile(self, kernel, dim):
        """The compiled form of one specialized kernel (`ir.Kernel`) for cube shape `dim`."""

    @abstractmethod
    def compile_ir(self, kernel, dim):
        """`compile` of IR built directly (a fused kernel), remembered by the IR's hash."""

    @abstractmethod
    def launch(self, kfn, count, dim, args: tuple, comptime: dict) -> None:
        """Run `@cube.kernel` `kfn` over `count` cubes of shape `dim`: its arrays written in place (NumPy
        arrays beside a device runtime's own are copied there and back), specialized by `comptime`."""

    @abstractmethod
    def run(self, compiled, count, args: tuple) -> None:
        """Run a kernel `compile`/`compile_ir` made on `args`, in parameter order."""

    # ---- arrays ---------------------------------------------------------------------------------
    @abstractmethod
    def empty(self, shape: tuple, dtype) -> object:
        """An uninitialized C-contiguous `ARRAY` of `shape` and (NumPy) `dtype`."""

    @abstractmethod
    def to_device(self, host: np.ndarray) -> object:
        """`host`'s values as an `ARRAY` of its shape (on the CPU: `host` itself)."""

    def to_host(self, array) -> np.ndarray:
        """A NumPy copy of `array` (waits for the work that writes it)."""
        return array.numpy()

    @abstractmethod
    def write_zeros(self, array) -> None:
        """Zeros over every element of a C-contiguous `array` this runtime made."""

    def bounds(self, array) -> tuple[int, int] | None:
        """(min, max) of `array`'s values when known without reading them (`DeviceArray.bounds`), else
        None: an index check then reads the values."""
        return array.bounds

    @abstractmethod
    def synchronize(self) -> None:
        """Wait for everything queued so far."""

    @abstractmethod
    def memory_stats(self, reset_peaks: bool = False) -> MemoryStats:
        """Reserved and in-use bytes of the pool its arrays come from, and their peaks (`reset_peaks`:
        then restarted from the current bytes)."""

    @abstractmethod
    def memory_cleanup(self) -> int:
        """Give the pool's empty pages back; the bytes released."""

    # ---- record and replay (optional: `records_launches`) -----------------------------------------
    def record_launches(self) -> AbstractContextManager:
        """A block within which the calling thread's launches are also recorded (see the module docstring)."""
        raise NotImplementedError(f"{type(self).__name__} does not record launches")

    def bind(self, launch, open_slots: Sequence[int]):
        """`launch` marshalled once for replay with new arrays at `open_slots`, or None when it cannot be."""
        return None

    def address(self, array) -> int | None:
        """The data address of `array` when it is one of this runtime's arrays, else None."""
        return None

    def shares_memory(self, a, b) -> bool:
        """Whether `a` and `b` may overlap in memory (True when it cannot tell)."""
        return True
