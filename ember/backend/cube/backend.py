"""The Cube backend: primitives run as cube kernels on one cube runtime (CPU, wgpu, CUDA).

`CubeBackend()` runs on the CPU runtime (kernels compiled to C with gcc/OpenMP); its handles are NumPy
arrays, the library's outputs coming from the host memory pool. `CubeBackend(runtime)` runs on a device
runtime (`wgpu_runtime()`, `cuda_runtime()`); its handles are that runtime's arrays (`WgpuArray`,
`CudaArray`), `from_host`/`to_host` copy, and `sync` waits for the queue. Reshape, permute, expand, slice
and flip are metadata on either kind of array (as in CubeCL), and kernels read any strides.

`execute` looks the primitive up in the lowering table (`lowering.TABLE`); a primitive without a row, a
case its row does not cover (`Unlowered`), or (on a device) a row that needs a host array or a kernel
the target cannot render (the runtime's `TARGET_ERRORS`), runs the
primitive's NumPy reference (on a device: through host copies) and is recorded in `fallbacks`, so the
gap stays visible. On a device, a primitive whose inputs or output have a dtype the runtime's kernels
cannot hold (`runtime.dtypes`; WGSL has no f64, i64, ...) raises `UnsupportedDTypeError` naming the
dtype and the adapter.

Example:
    >>> backend = CubeBackend()
    >>> h = backend.from_host(np.ones(3, np.float32))
    >>> backend.to_host(backend.execute(registry["exp"], (h,), {}, Aval((3,), f32))).round(3)
    array([2.718, 2.718, 2.718], dtype=float32)
    >>> backend.fallbacks
    set()
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ...cube.kernels.common import CREATING_ON
from ...cube.runtime.arguments import DeviceArray, HostCopyError
from ...cube.runtime.host import host_pool
from ...cube.runtime.memory_pool import MemoryStats
from ...dtype import ALL, dtype_of
from ...errors import DTypeError
from ...ops.primitive import Aval, Primitive
from ..base import Backend
from .lowering import TABLE, Unlowered


class UnsupportedDTypeError(DTypeError):
    """A dtype the backend's runtime cannot hold in its kernels; names the dtype, the primitive and the device."""


class CubeBackend(Backend):
    """Runs primitives with the cube kernel library on one runtime (see the module docstring).

    Example:
        >>> CubeBackend(wgpu_runtime()).name
        'cube-wgpu'
    """

    dtypes = ALL

    def __init__(self, runtime=None) -> None:
        """`runtime`: a device runtime (wgpu, CUDA); None for the CPU runtime on NumPy arrays."""
        self.runtime = runtime
        self.cube_target = getattr(runtime, "target", "cpu")
        """The cube target its kernels run on (`ember.extension.cube_target` reads it)."""
        self.name = f"cube-{self.cube_target}"
        if runtime is not None:
            self.dtypes = tuple(d for d in ALL if d.name in runtime.dtypes)
            self._held = frozenset(np.dtype(d.np) for d in self.dtypes)
            self._held_dtypes = frozenset(self.dtypes)
            self._where = getattr(runtime, "adapter_name", None) or repr(runtime)
            self._unrenderable = getattr(runtime, "TARGET_ERRORS", ())
        self.fallbacks: set[str] = set()
        """Names of primitives that ran on their NumPy reference at least once."""

    def execute(self, prim: Primitive, inputs: Sequence, params: dict, out: Aval):
        if self.runtime is not None:
            return self._execute_on_device(prim, inputs, params, out)
        row = TABLE.get(prim.name)
        if row is not None:
            try:
                return row.run(out, *inputs, **params)
            except Unlowered:
                pass
        self.fallbacks.add(prim.name)
        result = prim.reference(*inputs, **params)
        # NumPy returns scalars, not 0-d arrays, from some ops on 0-d inputs.
        return result if type(result) is np.ndarray else np.asarray(result)

    def _execute_on_device(self, prim: Primitive, inputs: Sequence, params: dict, out: Aval):
        held = self._held
        if out.dtype not in self._held_dtypes:
            self._refuse(prim, out.dtype)
        for a in inputs:
            if a.dtype not in held:
                self._refuse(prim, dtype_of(a.dtype))
        row = TABLE.get(prim.name)
        if row is not None:
            token = CREATING_ON.set(self.runtime)  # creation kernels (fill, uniform) allocate there
            try:
                result = row.run(out, *inputs, **params)
                if isinstance(result, DeviceArray):
                    return result
                return self.from_host(np.asarray(result))  # a row that answered on the host
            except (Unlowered, HostCopyError, *self._unrenderable):
                pass  # a kernel this target cannot render (an i64 scalar on WGSL), a host-only row
            finally:
                CREATING_ON.reset(token)
        self.fallbacks.add(prim.name)
        result = prim.reference(*[self.to_host(a) for a in inputs], **params)
        return self.from_host(np.asarray(result))

    def _refuse(self, prim: Primitive, dtype) -> None:
        raise UnsupportedDTypeError(
            f"{prim.name}: {dtype.name} cannot be held by the cube kernels of {self._where} "
            f"(they hold {', '.join(d.name for d in self.dtypes)})")

    def from_host(self, array: np.ndarray):
        if self.runtime is None:
            return array
        if array.dtype not in self._held:
            raise UnsupportedDTypeError(f"a tensor of {dtype_of(array.dtype).name} cannot be held by the cube "
                                        f"kernels of {self._where} (they hold "
                                        f"{', '.join(d.name for d in self.dtypes)})")
        return self.runtime.to_device(array)

    def to_host(self, handle) -> np.ndarray:
        return handle if self.runtime is None else handle.numpy()

    def value_bounds(self, handle) -> tuple[int, int] | None:
        return None if self.runtime is None else handle.bounds  # host arrays: reading them costs no wait

    def sync(self) -> None:
        if self.runtime is not None:
            self.runtime.synchronize()

    def memory_stats(self) -> MemoryStats:
        """Reserved and in-use bytes of the pool this backend's arrays come from, and their peaks."""
        if self.runtime is None:
            return host_pool().stats()
        return getattr(self.runtime, "memory_stats", self.runtime.pool.stats)()

    def memory_cleanup(self) -> int:
        """Give the pool's empty pages back (to the device, or to the host allocator); bytes released."""
        if self.runtime is None:
            return host_pool().cleanup()
        return getattr(self.runtime, "memory_cleanup", self.runtime.pool.cleanup)()
