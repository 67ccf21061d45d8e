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

import ctypes
import threading

import numpy as np

from .memory_pool import MemoryPool


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


class _Chunk:
    """Base of the ctypes types that lend a pooled slice's memory to NumPy (`_chunk_type`): every view of
    the array ends its `.base` chain at the chunk, so the slice goes back to the pool (`__del__`) only
    when no view is left. (NumPy wraps a ctypes array over an address faster than an object with
    `__array_interface__`.)"""

    def __del__(self) -> None:
        self._pool.free_later(self._slice)


_chunk_types: dict[int, type] = {}


def _chunk_type(nbytes: int) -> type:
    """The ctypes byte-array type of `nbytes` bytes with `_Chunk`'s release (one per size seen)."""
    found = _chunk_types.get(nbytes)
    if found is None:
        if len(_chunk_types) >= 1024:  # many sizes seen: start over (live chunks keep their types)
            _chunk_types.clear()
        found = _chunk_types[nbytes] = type("_Chunk", (_Chunk, ctypes.c_char * nbytes), {})
    return found


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
    piece = pool.reserve(nbytes)
    chunk = _chunk_type(nbytes).from_address(piece.page.buffer[1] + piece.offset)
    chunk._pool, chunk._slice = pool, piece
    return np.ndarray(shape, dtype, chunk)


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
    if a.flags.c_contiguous:
        return 0, a.nbytes
    lo = sum(min(0, s * (n - 1)) for s, n in zip(a.strides, a.shape))
    hi = sum(max(0, s * (n - 1)) for s, n in zip(a.strides, a.shape)) + a.itemsize
    return lo, hi - lo
