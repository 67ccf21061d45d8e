"""The backend protocol: what every backend, and every decorator over a backend, implements.

A backend executes primitives (`ember.ops.registry`: a small closed list of creation, elementwise,
compare, cast, reduce, arg-reduce, scan, sort, matmul, movement, index and module ops) on its own
handles, and moves data to and from the host. It never sees Python scalars, dtype promotion or
broadcasting errors: the tensor layer and each primitive's shape rule have dealt with those before
`execute` is called, so a backend only has to compute.

Decorators (`Autodiff`, `Fusion`) implement the same protocol by wrapping another backend (`inner`)
and forwarding to it, so stacks such as `Autodiff(Fusion(Cube(cpu)))` are built by composition.

Example:
    >>> backend = NumpyBackend()
    >>> h = backend.from_host(np.ones(3, np.float32))
    >>> backend.to_host(backend.execute(registry["exp"], (h,), {}, Aval((3,), f32))).round(3)
    array([2.718, 2.718, 2.718], dtype=float32)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Sequence

import numpy as np

from ..dtype import DType
from ..ops.primitive import Aval, Primitive

Handle = Any
"""A backend's own reference to tensor data (a NumPy array for the NumPy backend)."""


class Backend(ABC):
    """One layer of a device's backend stack."""

    name: str = "backend"
    dtypes: tuple[DType, ...] = ()

    @abstractmethod
    def execute(self, prim: Primitive, inputs: Sequence[Handle], params: dict, out: Aval) -> Handle:
        """Run `prim` on `inputs` (handles of this backend) with keyword `params`; return the output.

        `out` is the output's shape and dtype, already given by the primitive's shape rule.
        """

    @abstractmethod
    def from_host(self, array: np.ndarray) -> Handle:
        """Take a host array (of an ember dtype) into this backend. May share memory with `array`."""

    @abstractmethod
    def to_host(self, handle: Handle) -> np.ndarray:
        """Give the data of `handle` as a host array (read-only view or copy)."""

    def sync(self) -> None:
        """Wait until all queued work is done (a no-op for eager backends)."""

    def value_bounds(self, handle: Handle) -> tuple[int, int] | None:
        """(min, max) of an integer handle's values when this backend knows them without waiting for a
        device (device data uploaded from host data: `DeviceArray.bounds`), else None (also for no
        values). Checks of index values (class targets) read the values only when this says nothing;
        this default (host backends, where a read costs no wait) says nothing."""
        return None

    def move_from(self, source: "Backend", handle: Handle, aval: Aval) -> Handle | None:
        """`handle` of backend `source` as a handle of this one, moved without passing through this host,
        or None where this backend has no such path (`Tensor.to` then goes through the host). The remote
        backend moves a tensor between two servers directly."""
        return None

    def supports(self, dtype: DType) -> bool:
        """Whether tensors of `dtype` can live on this backend."""
        return dtype in self.dtypes


class Decorator(Backend):
    """A backend that wraps another one (`inner`) and forwards to it by default."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.dtypes = inner.dtypes

    def sync(self) -> None:
        self.inner.sync()
