"""Strided views that let one compiled kernel serve many shapes.

A cube kernel is specialized (compiled once) per rank of its layouts, so a 2-D and a 3-D contiguous
add would be two gcc runs. Before launching, the backend rewrites operands into equivalent views with
as few dims as their strides allow: adjacent dims merge when, for every operand, stepping over the
outer dim equals stepping over the whole inner one; size-1 dims vanish. Contiguous operands of any
shape become 1-D, and the rank of what is left is padded to a few fixed sizes.

Example:
    >>> shape, (a, b) = merged_operands((4, 5, 6), np.ones((4, 5, 6)), np.ones(6))
    >>> shape, b.strides                      # (4, 5) merged, then padded to rank 4
    ((1, 1, 20, 6), (0, 0, 0, 8))
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ...cube.kernels.common import broadcast_strides, element_strides, merge_dims
from ...cube.runtime.arguments import DeviceArray

# Strided layouts of rank 2..4 are padded to 4 (leading size-1 dims), so they share one compiled kernel;
# a padded dim costs a division per element, a new rank costs a compilation (a gcc run).
PADDED_RANK = 4


def view(a: np.ndarray, shape: Sequence[int], strides: Sequence[int]) -> np.ndarray:
    """A read-only view of `a`'s memory with the given shape and element strides."""
    if isinstance(a, DeviceArray):
        return a.strided(shape, [s * a.itemsize for s in strides])
    return as_strided(a, tuple(shape), tuple(s * a.itemsize for s in strides), writeable=False)


def _pad(shape: list, strides: list[list]) -> tuple[list, list]:
    rank = len(shape)
    want = 1 if rank <= 1 else PADDED_RANK if rank <= PADDED_RANK else rank
    extra = want - rank
    return [1] * extra + shape, [[0] * extra + s for s in strides]


def merged_operands(shape: tuple, *arrays: np.ndarray) -> tuple[tuple, list]:
    """Views of `arrays` broadcast to `shape`, with dims merged and the rank padded (see module doc).

    The kernel's output for the returned shape has `shape`'s elements in C order, so reshaping it to
    `shape` is free. Empty shapes are returned unchanged (no kernel runs for them).
    """
    if math.prod(shape) == 0:
        return shape, list(arrays)
    merged, strides = merge_dims(shape, [broadcast_strides(shape, a) for a in arrays])
    merged, strides = _pad(merged, strides)
    return tuple(merged), [view(a, merged, s) for a, s in zip(arrays, strides)]


def grouped(x: np.ndarray, groups: Sequence[Sequence[int]]) -> tuple[np.ndarray, list[int]]:
    """`x` permuted to the concatenation of `groups` (dims), each group's dims merged where possible.

    Returns the view and the rank of each merged group. A group keeps at least one dim (of size 1 if
    all its dims merge away), so its position survives.

    Example:
        >>> v, ranks = grouped(np.ones((2, 3, 4)), [(0,), (1, 2)])     # kept dims, then reduced dims
        >>> v.shape, ranks
        ((2, 12), [1, 1])
    """
    strides = element_strides(x)
    shape: list[int] = []
    new_strides: list[int] = []
    ranks = []
    for dims in groups:
        sizes = [x.shape[d] for d in dims]
        if 0 in sizes:
            part, (part_strides,) = [0], [[0]]
        else:
            part, (part_strides,) = merge_dims(sizes, [[strides[d] for d in dims]])
        if not part:
            part, part_strides = [1], [0]
        shape += part
        new_strides += part_strides
        ranks.append(len(part))
    return view(x, shape, new_strides), ranks
