"""What the device runtimes (CUDA, wgpu) share about launch arguments: the common part of their device
arrays, argument counts, the dtypes that pick a specialization, and what an array argument must be.

Example:
    >>> check_count(kfn, args)
    >>> key, dtypes, comptime = specialization(kfn, dim, args, comptime, CudaArray)
"""

from __future__ import annotations

import numpy as np

from ..ir import DTYPES
from ..lang import KernelError

NP_TO_CUBE = {np.dtype(d.np): d for d in DTYPES.values()}


class DeviceArray:
    """An array on a device: its runtime, shape, NumPy dtype, element count and bytes.

    A runtime's array type (CudaArray, WgpuArray) adds the memory that holds the elements.
    """

    def __init__(self, runtime, shape: tuple, dtype) -> None:
        self.runtime = runtime
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.size * self.dtype.itemsize


def check_count(kfn, args: tuple) -> None:
    """KernelError naming the runtime parameters when `args` has too many or too few."""
    if len(args) != len(kfn.runtime_params):
        raise KernelError(f"{kfn.__name__} takes {len(kfn.runtime_params)} runtime arguments "
                          f"({', '.join(p.name for p in kfn.runtime_params)}), got {len(args)}")


def specialization(kfn, dim, args: tuple, comptime: dict, device_array: type) -> tuple:
    """(cache key, dtypes, comptime values) of `kfn` launched on `args` with cube shape `dim`.

    Array arguments must be `device_array`s or NumPy arrays of a dtype cube has.
    """
    comptime = kfn.comptime_values(comptime)
    arg_dtypes = []
    for p, a in zip(kfn.runtime_params, args):
        if p.kind != "array":
            arg_dtypes.append(None)
            continue
        if not isinstance(a, (np.ndarray, device_array)):
            raise KernelError(f"{kfn.__name__}: argument {p.name!r} must be a {device_array.__name__} or a NumPy "
                              f"array, got {type(a).__name__}")
        arg_dtypes.append(NP_TO_CUBE.get(a.dtype))
        if arg_dtypes[-1] is None:
            raise KernelError(f"{kfn.__name__}: arrays of {a.dtype} are not supported")
    dtypes = kfn.resolve_dtypes(tuple(arg_dtypes), comptime)
    return (kfn, dtypes, tuple(sorted(comptime.items())), dim), dtypes, comptime


def check_array(name: str, p, a, written: bool) -> None:
    """KernelError when array argument `a` of parameter `p` of kernel `name` cannot be passed: over 2**31
    elements (indices are 32-bit), or a read-only NumPy array the kernel writes."""
    if a.size >= 2**31:
        raise KernelError(f"{name}: arrays over 2**31 elements need 64-bit indices")
    if written and isinstance(a, np.ndarray) and not a.flags.writeable:
        raise KernelError(f"{name}: argument {p.name!r} is written by the kernel but the array is read-only")


class Specializing:
    """The part of a device runtime that compiles each specialization of a kernel once.

    A runtime sets `ARRAY` (its device array type) and has `compile(kernel, dim)`, a `_compiled` dict
    and a `_lock`.
    """

    ARRAY: type = DeviceArray

    def prepare(self, kfn, dim, args: tuple, comptime: dict):
        """The compiled kernel for these arguments, from memory when this key was seen before."""
        key, dtypes, comptime = specialization(kfn, dim, args, comptime, self.ARRAY)
        with self._lock:  # tracing is not thread-safe; compiles are short next to a launch's copies
            compiled = self._compiled.get(key)
            if compiled is None:
                compiled = self._compiled[key] = self.compile(kfn.specialize(dtypes, comptime), dim)
        return compiled
