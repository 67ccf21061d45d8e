"""The NumPy backend: eager, always available, and the reference every other backend is tested against.

Handles are NumPy arrays; executing a primitive runs its registered NumPy reference. Arrays may be views
of one another (slices, permutes, expands share memory): that is safe because no primitive writes into
its inputs.

Example:
    >>> x = ember.ones(2, device=Device.numpy())
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..dtype import ALL
from ..ops.primitive import Aval, Primitive
from .base import Backend


class NumpyBackend(Backend):
    """Runs every primitive with its NumPy reference."""

    name = "numpy"
    dtypes = ALL

    def execute(self, prim: Primitive, inputs: Sequence[np.ndarray], params: dict, out: Aval) -> np.ndarray:
        out = prim.reference(*inputs, **params) if params else prim.reference(*inputs)
        # NumPy returns scalars, not 0-d arrays, from some ops on 0-d inputs.
        return out if type(out) is np.ndarray else np.asarray(out)

    def from_host(self, array: np.ndarray) -> np.ndarray:
        return array

    def to_host(self, handle: np.ndarray) -> np.ndarray:
        return handle
