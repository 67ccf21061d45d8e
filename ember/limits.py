"""Size limits: a result is refused before anything is allocated when it cannot fit any memory here.

`check_size` is called by the creation ops and by the shape rules of the ops whose result can outgrow
their inputs, so every backend refuses alike, at once; `memory_limit()` is the largest of the host's
memory (capped by its cgroup) and each started GPU's (`note_device_memory`, called by a runtime).

Example:
    >>> check_size("zeros", (2, 3), f32)          # fits: returns None
    >>> memory_limit() > 1 << 30
    True
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

from .errors import OutOfMemoryError, ShapeError

if TYPE_CHECKING:
    from .dtype import DType


def check_size(op: str, shape: tuple[int, ...], dtype: DType) -> None:
    """Refuse a result of `shape` in `dtype` before anything is allocated: `ShapeError` for a negative
    dimension, `OutOfMemoryError` when its bytes exceed `memory_limit()`; both name `op` and the shape.
    The creation ops and the shape rules of the ops whose result can outgrow their inputs (broadcasting,
    `expand`, `matmul`) call it, so every backend refuses alike, at once.

    Example:
        >>> check_size("zeros", (1 << 40,), f32)
        Traceback (most recent call last):
        ember.errors.OutOfMemoryError: zeros: shape (1099511627776,) of f32 needs 4398046511104 bytes (4.0 TiB), ...
    """
    if min(shape, default=0) < 0:
        raise ShapeError(op, f"negative dimension in shape {tuple(shape)}")
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > _memory[0]:
        raise OutOfMemoryError(f"{op}: shape {tuple(shape)} of {dtype} needs {nbytes} bytes ({_human(nbytes)}), "
                               f"more than the largest memory here ({_human(_memory[0])})")


def memory_limit() -> int:
    """The bytes `check_size` lets one tensor have: the largest of this machine's memory (its physical
    memory, or the cgroup's limit when lower) and the memory of each GPU whose runtime started
    (`note_device_memory`). A tensor under it may still not fit its own device: the device's
    allocator then raises.

    Example:
        >>> memory_limit() > 1 << 30
        True
    """
    return _memory[0]


def note_device_memory(nbytes: int) -> None:
    """Let `check_size` admit tensors up to `nbytes` (a device's total memory, above the host's).

    Example:
        >>> note_device_memory(141 << 30)   # an H200 on a host with less memory
    """
    _memory[0] = max(_memory[0], int(nbytes))


def _host_memory() -> int:
    """Physical memory, capped by the cgroup's memory limit (v2, then v1) where one is set."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # no sysconf names (Windows, some BSDs): no bound
        return 1 << 62
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
        break
    return total


def _human(nbytes: int) -> str:
    """`nbytes` in the largest binary unit it fills, up to TiB: "4.0 TiB"."""
    units = ("bytes", "KiB", "MiB", "GiB", "TiB")
    power = min(len(units) - 1, max(0, (nbytes.bit_length() - 1) // 10))
    return f"{nbytes} bytes" if power == 0 else f"{nbytes / 1024 ** power:.1f} {units[power]}"


_memory = [_host_memory()]
