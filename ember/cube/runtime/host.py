"""Host-array helpers shared by the device runtimes (CUDA, wgpu)."""

from __future__ import annotations

import numpy as np


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
