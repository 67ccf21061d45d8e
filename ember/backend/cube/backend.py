"""The Cube(cpu) backend: primitives run as cube kernels compiled to C (gcc/OpenMP) on NumPy arrays.

Handles are NumPy arrays owned by the backend (possibly strided views: reshape, permute, expand, slice
and flip are metadata, as in CubeCL, and kernels read any strides). `execute` looks the primitive up
in the lowering table (`lowering.TABLE`); a primitive without a row, or a case its row does not
cover, runs the primitive's NumPy reference and is recorded in `fallbacks`, so the gap stays visible.

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

from ...dtype import ALL
from ...ops.primitive import Aval, Primitive
from ..base import Backend
from .lowering import TABLE, Unlowered


class CubeBackend(Backend):
    """Runs primitives with the cube kernel library on the CPU (see the module docstring)."""

    name = "cube-cpu"
    dtypes = ALL

    def __init__(self) -> None:
        self.fallbacks: set[str] = set()
        """Names of primitives that ran on their NumPy reference at least once."""

    def execute(self, prim: Primitive, inputs: Sequence[np.ndarray], params: dict, out: Aval) -> np.ndarray:
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

    def from_host(self, array: np.ndarray) -> np.ndarray:
        return array

    def to_host(self, handle: np.ndarray) -> np.ndarray:
        return handle
