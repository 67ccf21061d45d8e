"""The torch backend: ember's primitives run by PyTorch's ops on one torch device.

Handles are torch tensors on that device. `execute` looks the primitive up in `table.TABLE`; a
primitive without a row (the random ones: `table.MISSING`), or a case its row does not cover
(`Unsupported`: an integer max pool, a 4-d convolution), runs the primitive's NumPy reference through
the host and is recorded in `fallbacks`, so the gap stays visible. A dtype the device cannot hold (f64
on MPS) raises `UnsupportedDTypeError` naming it and the device.

Example:
    >>> backend = TorchBackend(torch.device("cpu"))
    >>> h = backend.from_host(np.ones(3, np.float32))
    >>> backend.to_host(backend.execute(registry["exp"], (h,), {}, Aval((3,), f32))).round(3)
    array([2.718, 2.718, 2.718], dtype=float32)
    >>> backend.fallbacks
    set()
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ...dtype import ALL, dtype_of
from ...ops.primitive import Aval, Primitive
from ..base import Backend
from .convert import TORCH, Unsupported, from_host, to_host
from .table import CREATION, TABLE


class TorchBackend(Backend):
    """Runs primitives with torch ops on `device` (a `torch.device`)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.name = f"torch-{device}"
        refused = ("f64",) if device.type == "mps" else ()  # Apple's MPS has no f64
        self.dtypes = tuple(d for d in ALL if d.name not in refused)
        self._refused = frozenset(TORCH[name] for name in refused)
        self.fallbacks: set[str] = set()
        """Names of primitives that ran on their NumPy reference at least once."""

    def execute(self, prim: Primitive, inputs: Sequence[torch.Tensor], params: dict, out: Aval) -> torch.Tensor:
        if self._refused and out.dtype not in self.dtypes:
            self._refuse(prim.name, out.dtype.name)
        row = TABLE.get(prim.name)
        if row is not None:
            try:
                if prim.name in CREATION:
                    return row(out, device=self.device, **params)
                return row(out, *inputs, **params)
            except Unsupported:
                pass
        self.fallbacks.add(prim.name)
        result = prim.reference(*[to_host(t) for t in inputs], **params)
        return self.from_host(np.asarray(result))

    def from_host(self, array: np.ndarray) -> torch.Tensor:
        if self._refused and dtype_of(array.dtype) not in self.dtypes:
            self._refuse("a tensor", dtype_of(array.dtype).name)
        return from_host(array, self.device)

    def _refuse(self, what: str, dtype: str) -> None:
        from ..cube.backend import UnsupportedDTypeError
        raise UnsupportedDTypeError(f"{what}: {dtype} cannot be held by torch's {self.device.type!r} device "
                                    f"(it holds {', '.join(d.name for d in self.dtypes)})")

    def to_host(self, handle: torch.Tensor) -> np.ndarray:
        return to_host(handle)

    def sync(self) -> None:
        module = getattr(torch, self.device.type, None)
        if self.device.type != "cpu" and hasattr(module, "synchronize"):
            module.synchronize(self.device)
