"""Read a whole file as one buffer: memory-mapped (zero-copy, read-only) or read into memory.

Example:
    >>> buffer = map_file("model.ember")
    >>> bytes(buffer[:4])
    b'EMBR'
"""

from __future__ import annotations

import mmap as _mmap
import os

__all__ = ["map_file"]


def map_file(path: str | os.PathLike, mmap: bool = True) -> memoryview:
    """The bytes of `path`: a read-only memory map when `mmap`, else a writable copy in memory.

    Arrays made over the map with `numpy.frombuffer` are views of the page cache: nothing is read
    until touched, and the map stays open as long as any view of it lives.

    Example:
        >>> len(map_file("model.ember", mmap=False))
        4160
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if not mmap:
            data = bytearray(size)
            read = f.readinto(data)
            return memoryview(data)[:read]
        if size == 0:  # mmap refuses empty files; an empty buffer makes the parser report truncation
            return memoryview(b"")
        return memoryview(_mmap.mmap(f.fileno(), 0, access=_mmap.ACCESS_READ))
