"""What the kernel library's host functions share: allocation, launch sizing and strided layouts.

Host functions take NumPy arrays or a device runtime's arrays (`CudaArray`, `WgpuArray`, which carry
NumPy's metadata) and allocate their outputs with `empty(shape, dtype, *like)`: on the runtime of the
operands `like` (a NumPy array from the host pool when they are all NumPy), so a kernel launched on
them runs where they live (`KernelFunction.launch` routes by its array arguments). A function that
makes an array from no operand (`random.uniform`, the backend's `fill`) takes the runtime to make it
on as `runtime=`; one that may write its result over an operand takes that operand as `out=`
(`optim.adam_update`). `asarray` and `contiguous` are NumPy's, passing device arrays through.

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

import functools
import math
from typing import Sequence

import numpy as np

from ...dtype import NpTable, dtype_of
from ...errors import DTypeError, ShapeError
from .. import ir
from ..lang import CubeCount, CubeDim
from ..runtime.arguments import DeviceArray
from ..runtime.base import Runtime
from ..runtime.host import empty as host_empty
from ... import cube

MAX_ELEMENTS = 2**31 - 1
UNITS = 256  # units per cube for one-element-per-unit kernels
ROW_CHUNK = 4096  # a row-by-row kernel gives each cube at least this much of a long row (`row_chunks`)


def empty(shape, dtype, *like, runtime: Runtime | None = None):
    """An uninitialized C-contiguous array of `shape` and `dtype` on the runtime of the first device
    array among `like`, else on `runtime` (a creation function's, which has no operand to go by), else
    a NumPy array from the host pool.

    Example:
        >>> empty((2, 3), np.float32, x).shape        # x a WgpuArray: a WgpuArray on x's adapter
        (2, 3)
        >>> type(empty(3, np.float32, runtime=wgpu_runtime())).__name__
        'WgpuArray'
    """
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(shape)
    for a in like:
        if isinstance(a, DeviceArray):
            return a.runtime.empty(shape, dtype)
    if runtime is not None:
        return runtime.empty(shape, np.dtype(dtype))
    return host_empty(shape, np.dtype(dtype))


def zeros(shape, dtype, *like, runtime: Runtime | None = None):
    """`empty(shape, dtype, *like, runtime=runtime)` filled with zeros."""
    out = empty(shape, dtype, *like, runtime=runtime)
    if isinstance(out, DeviceArray):
        out.runtime.write_zeros(out)
    else:
        out[...] = 0
    return out


def asarray(x):
    """`x` unchanged when it is an array (NumPy or device), else `np.asarray(x)`."""
    return x if isinstance(x, (np.ndarray, DeviceArray)) else np.asarray(x)


def contiguous(x):
    """`x` when C-contiguous, else a C-contiguous copy on its own device (`np.ascontiguousarray`)."""
    if isinstance(x, DeviceArray):
        return x if x.flags.c_contiguous else x.copy()
    return np.ascontiguousarray(x)


def unit_rows(x) -> tuple:
    """(`x`, its row step in elements) for a 2-D `x` whose rows a kernel reads at that step: `x` itself
    when it is a device array of unit-stride rows at a step of at least a row (C order, or rows padded
    wider: a large cuBLAS product's output of misaligned columns, `runtime.cublas.WIDEN_MIN`), else a
    C-contiguous copy.

    Example:
        >>> unit_rows(np.ones((2, 3), np.float32))[1]
        3
    """
    if isinstance(x, DeviceArray) and len(x.shape) == 2:
        row, item = x.strides
        if (item == x.itemsize or x.shape[1] <= 1) and row >= x.shape[1] * x.itemsize and row % x.itemsize == 0:
            return x, row // x.itemsize
    x = contiguous(x)
    return x, x.shape[-1]


def copy_as(x, dtype):
    """A new C-contiguous copy of `x` converted to `dtype`, on `x`'s device."""
    if isinstance(x, DeviceArray):
        return x.astype(dtype)
    return np.array(x, dtype=dtype, order="C")


def result_type(*arrays):
    """NumPy's result dtype of `arrays` (NumPy or device arrays), from their dtypes alone."""
    return np.result_type(*(a.dtype for a in arrays))


def cube_dtype(np_dtype) -> ir.DType:
    """The kernel element type of a DType, a NumPy dtype or a name (u32/u64 included)."""
    if isinstance(np_dtype, ir.DType):
        return np_dtype
    found = _np_to_cube().get(np.dtype(np_dtype))
    return found if found is not None else dtype_of(np_dtype)


@functools.cache
def _np_to_cube() -> dict:
    return NpTable(ir.DTYPES.values())


def check_size(op: str, *arrays) -> None:
    """Raise `ShapeError` for an array of more elements than the kernels' i32 indices reach."""
    check_elements(op, *(a.shape for a in arrays))


def check_elements(op: str, *shapes: tuple) -> None:
    """`check_size` on shapes (an op's shape rule checks its arrays before they exist).

    Example:
        >>> check_elements("softmax", (1 << 16, 1 << 16))
        Traceback (most recent call last):
        ember.errors.ShapeError: softmax: (65536, 65536) has more than 2**31 - 1 elements (kernels index with i32)
    """
    for shape in shapes:
        if math.prod(shape) > MAX_ELEMENTS:
            raise ShapeError(op, f"{tuple(shape)} has more than 2**31 - 1 elements (kernels index with i32)")


def check_float_dtypes(op: str, *dtypes) -> None:
    """`DTypeError` unless the operands' dtypes (NumPy dtypes or ember DTypes) are one float dtype. The
    attention kernels check their arrays with it, and recorded ops' dtype rules (attention, the row ops)
    their inputs before they exist.

    Example:
        >>> check_float_dtypes("softmax_grad", np.float32, np.float16)
        Traceback (most recent call last):
        ember.errors.DTypeError: softmax_grad needs operands of one float dtype, got f32, f16
    """
    kinds = [cube_dtype(d) for d in dtypes]
    if len(set(kinds)) != 1 or not kinds[0].is_float:
        raise DTypeError(f"{op} needs operands of one float dtype, got {', '.join(t.name for t in kinds)}")


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


def merge_dims(shape: Sequence[int], strides: Sequence[Sequence[int]]) -> tuple[list, list]:
    """(shape, strides per operand) with adjacent dims merged where every operand allows it.

    `strides` are element strides, one sequence per operand, 0 where an operand is broadcast.
    Size-1 dims are dropped; the result may be empty (a single element).
    """
    out_shape: list[int] = []
    out_strides: list[list[int]] = [[] for _ in strides]
    for d, n in enumerate(shape):
        if n == 1:
            continue
        if out_shape and all(s[d] * n == o[-1] for s, o in zip(strides, out_strides)):
            out_shape[-1] *= n
            for s, o in zip(strides, out_strides):
                o[-1] = s[d]
        else:
            out_shape.append(n)
            for s, o in zip(strides, out_strides):
                o.append(s[d])
    return out_shape, out_strides


def row_layout(x, min_row: int, outer_rank: int):
    """How to read `x` (any strides) as rows of a C-ordered copy: None when its merged innermost dim is
    shorter than `min_row`, else (cubes, layout) with layout = [outer sizes, outer strides, row length,
    row stride, chunks per row] (i32; the outer dims padded to at least `outer_rank` with size-1 dims, as
    `offset` reads them), so that a kernel finds each row's start once instead of decoding every
    element's coordinates; `cubes` = rows * chunks (see `row_span`).

    Example:
        >>> row_layout(np.ones((3, 40)).T, 16, 1)      # 40 rows of 3: too short
        >>> row_layout(np.ones((40, 3)).T, 2, 1)[1].tolist()
        [3, 1, 40, 3, 1]
    """
    c_strides, step = [], 1
    for n in reversed(x.shape):
        c_strides.insert(0, step)
        step *= n
    shape, (strides, _) = merge_dims(x.shape, [element_strides(x), c_strides])
    if not shape or shape[-1] < min_row:
        return None
    pad = max(0, outer_rank - (len(shape) - 1))
    outer, outer_strides = [1] * pad + shape[:-1], [0] * pad + strides[:-1]
    chunks = row_chunks(shape[-1])
    layout = np.asarray(outer + outer_strides + [shape[-1], strides[-1], chunks], np.int32)
    return x.size // shape[-1] * chunks, layout


def row_chunks(length: int) -> int:
    """How many cubes share a row of `length` (ROW_CHUNK or more positions each), so that a few long rows
    still spread over many cubes."""
    return max(1, length // ROW_CHUNK)


@cube.function
def row_span(chunks, n, at):
    """(row, start, end) of part `at` of the rows of `n` positions each cut in `chunks` (at = row *
    chunks + chunk; a kernel's CUBE_POS when each cube takes a part); parts differ by at most one
    position, none shorter than n // chunks.

    Example:
        >>> row, lo, hi = row_span(layout[k], n, cube.CUBE_POS)      # inside a kernel
    """
    chunk = at % chunks
    q = n // chunks
    r = n % chunks
    lo = chunk * q + cube.min(chunk, r)
    return at // chunks, lo, lo + q + cube.select(chunk < r, cube.i32(1), cube.i32(0))


def broadcast_layout(shape: tuple, *arrays) -> np.ndarray:
    """[shape..., strides of arrays[0]..., strides of arrays[1]...] as i32 (see `offset`)."""
    parts = list(shape)
    for a in arrays:
        parts += broadcast_strides(shape, a)
    return np.asarray(parts, dtype=np.int32).reshape(-1)


def is_dense(shape: tuple, a: np.ndarray) -> bool:
    """True when `a` is C-contiguous with exactly `shape` (flat position == element offset)."""
    return a.shape == tuple(shape) and a.flags.c_contiguous


def read_kind(shape: tuple, a) -> str:
    """How a kernel reads operand `a` of an output of `shape`: "dense" (flat position == element offset),
    "scalar" (one value, broadcast: always element 0) or "strided" (`offset` decodes the position).

    Example:
        >>> read_kind((2, 3), np.ones((2, 3))), read_kind((2, 3), np.ones(1)), read_kind((2, 3), np.ones(3))
        ('dense', 'scalar', 'strided')
    """
    return "dense" if is_dense(shape, a) else "scalar" if a.size == 1 else "strided"


@cube.function
def element_at(pos, layout, ndim, which, kind):
    """Element offset of operand `which` read as `kind` (comptime, from `read_kind`) at flat position
    `pos`: a broadcast scalar needs no per-element index arithmetic (the integer divisions of `offset`
    keep a loop from vectorizing and cost ~10x the arithmetic of a cheap op)."""
    if kind == "dense":
        return pos
    if kind == "scalar":
        return cube.i32(0)
    return offset(pos, layout, ndim, which)


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
def position(n, shifted):
    """The flat position of this unit in a 1-D launch over `n` positions (`grid(n)`). With `shifted`
    (comptime; the host keeps n >= CUBE_DIM) the last cube is moved back to end at n, so every unit is in
    range and the kernel needs no bounds test: a few positions are computed twice, by units that write
    the same value (the output must not alias an input). On the C target a bounds test keeps gcc from
    vectorizing the unit loop (masked loads and stores), so this is several times faster there.

    Example:
        >>> i = position(len(out), shifted)          # inside a kernel
    """
    if shifted:
        return cube.min(cube.CUBE_POS * cube.CUBE_DIM, n - cube.CUBE_DIM) + cube.UNIT_POS
    return cube.ABSOLUTE_POS


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


@cube.kernel
def assign_kernel(src: cube.Array, dst: cube.Array, layout: cube.Array[cube.i32], ndim: cube.Comptime[int]):
    i = cube.ABSOLUTE_POS
    if i < len(dst):
        dst[offset(i, layout, ndim, 1)] = cube.cast(src[offset(i, layout, ndim, 0)], dst.dtype)


def assign(dst, value) -> None:
    """`dst[...] = value` (broadcast, converted to `dst`'s dtype) for NumPy and device arrays alike:
    on a device, a kernel writes through `dst`'s strides (a view: `padded[:, 1:-1] = x`).

    Example:
        >>> assign(out[:, 1:], np.float32(0))
    """
    if not isinstance(dst, DeviceArray):
        dst[...] = value.numpy() if isinstance(value, DeviceArray) else value
        return
    if not isinstance(value, (np.ndarray, DeviceArray)):
        value = np.asarray(value, dst.dtype)
    check_size("assign", dst)
    if dst.size:
        count, dim = grid(dst.size)
        assign_kernel.launch(count, dim, value, dst, broadcast_layout(dst.shape, value, dst), ndim=dst.ndim)
