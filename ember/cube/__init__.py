"""cube: ember's kernel language. Python functions under `@cube.kernel` become typed IR, then code.

Example:
    >>> import numpy as np
    >>> from ember import cube
    >>> @cube.kernel
    ... def axpy(x: cube.Array[cube.f32], y: cube.Array[cube.f32], a: cube.f32):
    ...     i = cube.ABSOLUTE_POS
    ...     if i < len(x):
    ...         y[i] = a * x[i] + y[i]
    >>> x = np.arange(4, dtype=np.float32); y = np.ones(4, np.float32)
    >>> axpy.launch(cube.CubeCount(1), cube.CubeDim(4), x, y, 2.0)
    >>> y
    array([1., 3., 5., 7.], dtype=float32)

See docs/cube.md for the language, the IR, the passes and the targets.
"""

from ..dtype import f64, f32, f16, bf16, i64, i32, i16, i8, u8, bool_, DType
from .ir import u32, u64
from .lang import (Array, Comptime, Scalar, CubeCount, CubeDim, KernelError, BUILTINS, INTRINSICS)
from .kernel import kernel, function, KernelFunction, CubeFunction
from .frontend.source import register_source

globals().update(BUILTINS)
globals().update(INTRINSICS)


def cpu_available() -> tuple:
    """(True, "") when a C compiler with OpenMP can build kernels here, else (False, reason)."""
    from .runtime.cpu import cpu_available as check
    return check()


__all__ = ["Array", "Comptime", "Scalar", "CubeCount", "CubeDim", "KernelError", "kernel", "function",
           "KernelFunction", "CubeFunction", "cpu_available", "register_source", "DType",
           "f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "u8", "u32", "u64", "bool_",
           *BUILTINS, *INTRINSICS]
