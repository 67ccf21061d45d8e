"""Host arrays: the pool the kernel library's NumPy outputs come from, and helpers the device runtimes
(CUDA, wgpu) share.

`empty(shape, dtype)` is a NumPy array over a slice of the host `MemoryPool` (pages are NumPy byte
arrays); the slice goes back to the pool when the last view of the array dies, so `host_pool().stats()`
follows the lifetimes of the library's outputs (`Device.cpu().memory_stats()`).

Example:
    >>> a = empty((2, 3), np.float32)
    >>> host_pool().stats().in_use >= 24
    True
"""

from __future__ import annotations

import threading

import numpy as np

from .memory_pool import MemoryPool, MemoryStats


def _allocate(nbytes: int) -> tuple:
    page = np.empty(nbytes, np.uint8)
    return page, page.ctypes.data


_pool: MemoryPool | None = None
_pool_lock = threading.Lock()


def host_pool() -> MemoryPool:
    """The process-wide pool of host memory (created on first use, `[memory]` settings apply)."""
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                from .memory_pool import pool_from_settings
                _pool = pool_from_settings(_allocate, lambda page: None)
    return _pool


class _Block:
    """The memory of one pooled NumPy array: every view of the array ends its `.base` chain here, so
    the slice goes back to the pool (`__del__`) only when no view is left."""

    __slots__ = ("__array_interface__", "_slice", "_pool")

    def __init__(self, pool: MemoryPool, piece, shape: tuple, typestr: str) -> None:
        self._pool, self._slice = pool, piece
        self.__array_interface__ = {"data": (piece.page.buffer[1] + piece.offset, False), "shape": shape,
                                    "typestr": typestr, "version": 3}

    def __del__(self) -> None:
        self._pool.free_later(self._slice)


def empty(shape: tuple, dtype: np.dtype) -> np.ndarray:
    """An uninitialized C-contiguous NumPy array whose memory comes from the host pool.

    Example:
        >>> empty((4,), np.dtype(np.int32)).shape
        (4,)
    """
    nbytes = dtype.itemsize
    for n in shape:
        nbytes *= n
    if nbytes == 0:
        return np.empty(shape, dtype)
    pool = _pool or host_pool()
    if dtype.kind == "V":  # bf16 and friends: NumPy's interface cannot name them, view the bytes
        return np.asarray(_Block(pool, pool.reserve(nbytes), shape, f"|V{dtype.itemsize}")).view(dtype)
    return np.asarray(_Block(pool, pool.reserve(nbytes), shape, dtype.str))


def host_stats() -> MemoryStats:
    """The host pool's stats (see `MemoryPool.stats`)."""
    return host_pool().stats()


def host_span(a: np.ndarray) -> tuple[int, int]:
    """(byte offset from `a`'s first element to the lowest byte it covers, bytes covered).

    A strided view (transposed, negative strides, broadcast) is copied to a device as the span of
    memory under it, so a kernel reads it through the same strides it would use on the host.

    Example:
        >>> host_span(np.zeros((3, 4), np.float64)[::-1])
        (-48, 96)
    """
    if a.size == 0:
        return 0, 0
    lo = sum(min(0, s * (n - 1)) for s, n in zip(a.strides, a.shape))
    hi = sum(max(0, s * (n - 1)) for s, n in zip(a.strides, a.shape)) + a.itemsize
    return lo, hi - lo
