"""What the kernel library's host functions share: launch sizing and strided layouts.

Arrays reach a kernel as a pointer to their first element; their shape and strides (in elements,
any sign, 0 for a broadcast dimension) travel in a small i32 "layout" array so that one compiled
kernel serves every shape of a given rank. `offset` turns a flat output position into an element
offset of one operand.

Example:
    >>> layout = broadcast_layout((2, 3), np.ones((1, 3)), np.ones((2, 3)).T.T)
    >>> layout.tolist()    # shape, then each operand's strides
    [2, 3, 0, 1, 3, 1]
"""

from __future__ import annotations

import numpy as np

from ...dtype import dtype_of
from ...errors import ShapeError
from .. import ir
from ..lang import CubeCount, CubeDim
from ... import cube

MAX_ELEMENTS = 2**31 - 1
UNITS = 256  # units per cube for one-element-per-unit kernels


def cube_dtype(np_dtype) -> ir.DType:
    """The kernel element type of a DType, a NumPy dtype or a name (u32/u64 included)."""
    if isinstance(np_dtype, ir.DType):
        return np_dtype
    found = {np.dtype(d.np): d for d in ir.DTYPES.values()}.get(np.dtype(np_dtype))
    return found if found is not None else dtype_of(np_dtype)


def check_size(op: str, *arrays) -> None:
    for a in arrays:
        if a.size > MAX_ELEMENTS:
            raise ShapeError(op, f"{a.shape} has more than 2**31 - 1 elements (kernels index with i32)")


def grid(n: int, units: int = UNITS) -> tuple:
    """(CubeCount, CubeDim) covering `n` positions with one unit each."""
    return CubeCount(max(0, -(-n // units))), CubeDim(units)


def element_strides(a: np.ndarray) -> tuple:
    return tuple(s // a.itemsize for s in a.strides)


def broadcast_strides(shape: tuple, a: np.ndarray) -> list:
    """`a`'s element strides seen from an output of `shape` (0 where `a` is broadcast)."""
    pad = len(shape) - a.ndim
    strides = [0] * pad
    for size, dim, stride in zip(shape[pad:], a.shape, element_strides(a)):
        strides.append(0 if dim == 1 and size != 1 else stride)
    return strides


def broadcast_layout(shape: tuple, *arrays) -> np.ndarray:
    """[shape..., strides of arrays[0]..., strides of arrays[1]...] as i32 (see `offset`)."""
    parts = list(shape)
    for a in arrays:
        parts += broadcast_strides(shape, a)
    return np.asarray(parts, dtype=np.int32).reshape(-1)


def is_dense(shape: tuple, a: np.ndarray) -> bool:
    """True when `a` is C-contiguous with exactly `shape` (flat position == element offset)."""
    return a.shape == tuple(shape) and a.flags.c_contiguous


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
