"""The Cube backend: primitives run as cube kernels on one cube runtime (CPU, wgpu, CUDA).

`CubeBackend(runtime)` runs on any `ember.cube.runtime.base.Runtime`: `cpu_runtime()` (kernels compiled
to C with gcc/OpenMP; its arrays are NumPy's, the library's outputs coming from the host memory pool),
`wgpu_runtime()`, `cuda_runtime()` (their arrays are `WgpuArray`, `CudaArray`). `from_host`/`to_host`
copy through the runtime (nothing to copy on the CPU), and `sync` waits for its queue. Reshape,
permute, expand, slice and flip are metadata on either kind of array (as in CubeCL), and kernels read
any strides.

`execute` looks the primitive up in the lowering table (`lowering.TABLE`; `complex.COMPLEX_TABLE` when an
operand or the result is complex); a primitive without a row, a case its row does not cover
(`Unlowered`), or (on a device) a row that needs a host array or a kernel the target cannot render (the
runtime's `TARGET_ERRORS`), runs the primitive's NumPy reference (on a device: through host copies) and
is recorded in `fallbacks`, so the gap stays visible. A primitive
whose inputs or output have a dtype the runtime's kernels cannot hold (`runtime.dtypes`; WGSL has no
f64, i64, ...) raises `UnsupportedDTypeError` naming the dtype and the adapter.

Example:
    >>> backend = CubeBackend(cpu_runtime())
    >>> h = backend.from_host(np.ones(3, np.float32))
    >>> backend.to_host(backend.execute(registry["exp"], (h,), {}, Aval((3,), f32))).round(3)
    array([2.718, 2.718, 2.718], dtype=float32)
    >>> backend.fallbacks
    set()
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ...cube.runtime.arguments import HostCopyError
from ...cube.runtime.base import Runtime
from ...cube.runtime.memory_pool import MemoryStats
from ...dtype import ALL, COMPLEX, NpTable, dtype_of, real_of
from ...errors import DTypeError
from ...ops.primitive import Aval, Primitive
from ..base import Backend
from .complex import COMPLEX_TABLE
from .lowering import TABLE, Unlowered


class UnsupportedDTypeError(DTypeError):
    """A dtype the backend's runtime cannot hold in its kernels; names the dtype, the primitive and the device."""


class CubeBackend(Backend):
    """Runs primitives with the cube kernel library on one runtime (see the module docstring).

    Example:
        >>> CubeBackend(wgpu_runtime()).name
        'cube-wgsl'
    """

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.cube_target = runtime.target
        """The cube target its kernels run on (`ember.extension.cube_target` reads it)."""
        self.name = f"cube-{self.cube_target}"
        # complex values are held as pairs of their parts (docs/complex.md): c64 where f32 is, c128 where f64
        parts = {d.name for d in ALL if d.name in runtime.dtypes}
        self.dtypes = tuple(d for d in ALL if d.name in parts or (d.is_complex and real_of(d).name in parts))
        self._held = NpTable(self.dtypes)  # NumPy dtypes held, without importing ml_dtypes for bf16
        self._held_dtypes = frozenset(self.dtypes)
        self._checks_dtypes = len(self.dtypes) < len(ALL)  # a runtime holding every dtype needs no check
        self._array = runtime.ARRAY
        self._not_here = (Unlowered, HostCopyError, *runtime.TARGET_ERRORS)
        self.fallbacks: set[str] = set()
        """Names of primitives that ran on their NumPy reference at least once."""

    def fusion_target(self):
        """The fusion hooks `Fusion(self)` runs its fused plans with (`ember.backend.cube.fused`)."""
        from .fused import CubeFusionTarget  # lazy: an unfused device does not load the fused kernels
        return CubeFusionTarget(self)

    def execute(self, prim: Primitive, inputs: Sequence, params: dict, out: Aval, *, over=None):
        """`Backend.execute`; `over`: an input the output may be written over (the fusion decorator's
        donation, `ember/backend/cube/fused/donation.py`), given to a row that `writes_over`."""
        if self._checks_dtypes:
            self._check_dtypes(prim, inputs, out)
        complex_ = out.dtype.category == COMPLEX
        for a in inputs:  # a plain loop: no generator frame on the dispatch hot path
            if a.dtype.kind == "c":
                complex_ = True
                break
        # complex operands: the rows that read them as float pairs
        row = (COMPLEX_TABLE if complex_ else TABLE).get(prim.name)
        if row is not None:
            try:
                if row.creates:  # fill, uniform, ...: made on this backend's runtime
                    result = row.run(out, *inputs, runtime=self.runtime, **params)
                elif over is not None and row.writes_over:
                    result = row.run(out, *inputs, over=over, **params)
                else:
                    result = row.run(out, *inputs, **params)
                if isinstance(result, self._array):
                    return result
                return self.from_host(np.asarray(result))  # a row that answered on the host
            except self._not_here:
                pass  # a kernel this target cannot render (an i64 scalar on WGSL), a host-only row
        self.fallbacks.add(prim.name)
        # NumPy returns scalars, not 0-d arrays, from some ops on 0-d inputs.
        result = prim.reference(*[self.to_host(a) for a in inputs], **params)
        return self.from_host(np.asarray(result))

    def _check_dtypes(self, prim: Primitive, inputs: Sequence, out: Aval) -> None:
        if out.dtype not in self._held_dtypes:
            self._refuse(prim, out.dtype)
        held = self._held
        for a in inputs:
            if a.dtype not in held:
                self._refuse(prim, dtype_of(a.dtype))

    def _refuse(self, prim: Primitive, dtype) -> None:
        raise UnsupportedDTypeError(
            f"{prim.name}: {dtype.name} cannot be held by the cube kernels of {self.runtime.adapter_name} "
            f"(they hold {', '.join(d.name for d in self.dtypes)})")

    def from_host(self, array: np.ndarray):
        if self._checks_dtypes and array.dtype not in self._held:
            raise UnsupportedDTypeError(f"a tensor of {dtype_of(array.dtype).name} cannot be held by the cube "
                                        f"kernels of {self.runtime.adapter_name} (they hold "
                                        f"{', '.join(d.name for d in self.dtypes)})")
        return self.runtime.to_device(array)

    def to_host(self, handle) -> np.ndarray:
        return self.runtime.to_host(handle)

    def value_bounds(self, handle) -> tuple[int, int] | None:
        return self.runtime.bounds(handle)

    def sync(self) -> None:
        self.runtime.synchronize()

    def memory_stats(self, reset_peaks: bool = False) -> MemoryStats:
        """Reserved and in-use bytes of the pool this backend's arrays come from, and their peaks."""
        return self.runtime.memory_stats(reset_peaks)

    def memory_cleanup(self) -> int:
        """Give the pool's empty pages back (to the device, or to the host allocator); bytes released."""
        return self.runtime.memory_cleanup()
