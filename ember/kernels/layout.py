"""Strided layouts: how a kernel reads arrays of any shape and strides, and views that let one compiled
kernel serve many shapes.

Arrays reach a kernel as a pointer to their first element; their shape and strides (in elements, any
sign, 0 for a broadcast dimension) travel in a small i32 "layout" array ([shape..., strides of operand
0..., strides of operand 1..., ...]: `broadcast_layout`), so that one compiled kernel serves every shape
of a given rank; `offset` turns a flat output position into an element offset of one operand.

A kernel is compiled per rank of its layouts, so before launching, operands are rewritten into
equivalent views with as few dims as their strides allow (`merged_operands`): adjacent dims merge
when, for every operand, stepping over the outer dim equals stepping over the whole inner one; size-1
dims vanish; contiguous operands of any shape become 1-D, and the rank of what is left is padded to
`PADDED_RANK`.

Example:
    >>> shape, (a, b) = merged_operands((4, 5, 6), np.ones((4, 5, 6)), np.ones(6))
    >>> shape, b.strides                      # (4, 5) merged, then padded to rank 4
    ((1, 1, 20, 6), (0, 0, 0, 8))
    >>> broadcast_layout(shape, a, b).tolist()
    [1, 1, 20, 6, 0, 0, 6, 1, 0, 0, 0, 1]
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .. import cube
from ..cube.runtime.arguments import DeviceArray
from ..cube.strides import merge_dims

PADDED_RANK = 4
"""Strided layouts of rank 2..4 are padded to this rank (leading size-1 dims), so they share one compiled
kernel: a padded dim costs a division per element, a new rank a compilation."""


def element_strides(a: np.ndarray) -> tuple:
    """`a`'s strides in elements."""
    return tuple(s // a.itemsize for s in a.strides)


def broadcast_strides(shape: tuple, a: np.ndarray) -> list:
    """`a`'s element strides seen from an output of `shape` (0 where `a` is broadcast)."""
    pad = len(shape) - a.ndim
    strides = [0] * pad
    for size, dim, stride in zip(shape[pad:], a.shape, element_strides(a)):
        strides.append(0 if dim == 1 and size != 1 else stride)
    return strides


def broadcast_layout(shape: tuple, *arrays) -> np.ndarray:
    """[shape..., strides of arrays[0]..., strides of arrays[1]...] as i32 (see `offset`); a rank-0
    shape is read as rank 1 of one element."""
    parts = list(shape) or [1]
    for a in arrays:
        parts += broadcast_strides(shape, a) or [0]
    return np.asarray(parts, dtype=np.int32).reshape(-1)


def view(a: np.ndarray, shape: Sequence[int], strides: Sequence[int]) -> np.ndarray:
    """A read-only view of `a`'s memory with the given shape and element strides (a reshape of `a`
    when those are its C order: the common case, and cheaper)."""
    if a.flags.c_contiguous and a.size == math.prod(shape) and _c_order(shape, strides):
        return a.reshape(shape)
    if isinstance(a, DeviceArray):
        return a.strided(shape, [s * a.itemsize for s in strides])
    return as_strided(a, tuple(shape), tuple(s * a.itemsize for s in strides), writeable=False)


def _c_order(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether `strides` (elements) are C order for `shape` (size-1 dims step anything)."""
    step = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != step:
            return False
        step *= n
    return True


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


@cube.function
def offset(pos, layout, ndim, which):
    """Element offset of operand `which` for flat position `pos` (layout as in `broadcast_layout`)."""
    off = cube.i32(0)
    rest = pos
    for d in cube.unroll(range(ndim - 1, -1, -1)):
        size = layout[d]
        off = off + (rest % size) * layout[ndim * (which + 1) + d]
        rest = rest // size
    return off


@cube.function
def unravel(pos, layout, ndim):
    """The coordinates (a tuple, one per dim) of flat position `pos` in the shape `layout[0:ndim]`."""
    coords = ()
    rest = pos
    for d in cube.unroll(range(ndim - 1, -1, -1)):
        coords = (rest % layout[d],) + coords
        rest = rest // layout[d]
    return coords


@cube.function
def dot(coords, layout, start):
    """sum(coords[d] * layout[start + d]): an element offset from coordinates and strides."""
    off = cube.i32(0)
    for d in cube.unroll(range(len(coords))):
        off = off + coords[d] * layout[start + d]
    return off
