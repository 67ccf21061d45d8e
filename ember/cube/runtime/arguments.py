"""Launch-argument checks the device runtimes (CUDA, wgpu) share: argument counts, the dtypes that pick
a specialization, and what an array argument must be.

Example:
    >>> check_count(kfn, args)
    >>> key, dtypes, comptime = specialization(kfn, dim, args, comptime, CudaArray)
"""

from __future__ import annotations

import numpy as np

from ..ir import DTYPES
from ..lang import KernelError

NP_TO_CUBE = {np.dtype(d.np): d for d in DTYPES.values()}


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
