"""Indexing kernels: gather, scatter (assign or add), index_select, index_add.

Semantics follow ember's primitives (`ember/ops/indexing.py`, PyTorch's): along `dim`, the output
coordinate (gather, index_select) or the target coordinate (scatter, index_add) comes from `index`;
every other coordinate is the position's own. Indices must lie in [0, size) (negative ones are
refused, as in PyTorch): the host checks them before launching. Adds go through
atomics, so duplicate indices accumulate; a plain scatter with duplicate indices keeps one of the
writes (which one is unspecified, as on every parallel backend). Inputs may have any strides;
outputs are new C-contiguous arrays.

Example:
    >>> gather(np.array([[1, 2], [3, 4]]), np.array([[1, 0], [0, 0]]), dim=1)
    array([[2, 1],
           [3, 3]])
"""

from __future__ import annotations

import numpy as np

from .. import cube
from ..errors import ShapeError
from ..cube.kernel import launch_runtime
from ..cube.runtime.arguments import DeviceArray
from .common import asarray, check_size, contiguous, copy_as, empty, grid, row_chunks, row_span
from .layout import dot, element_strides, offset, unravel

ATOMIC_DTYPES = ("float32", "float64", "int32", "int64")
# On the C target an index_add whose slices hold at least COLUMNS_MIN elements runs a unit per column
# (`index_add_columns_kernel`, COLUMN_UNITS a cube): an atomic add per element cost ~12 ns on one Zen 4
# thread, the embedding gradient of a character GPT ((2048, 64) into (65, 64)) 1.6 ms against 0.04; and
# index_select copies such slices whole (`index_select_rows_kernel`), not decoding each element's place.
COLUMNS_MIN, COLUMN_UNITS = 16, 64
# A plain scatter along the last dim with rows of at least ROW_MIN runs a cube per row (ROW_UNITS units at
# most; outer dims padded to ROW_OUTER_RANK so ranks 1..4 share a compiled kernel).
ROW_MIN, ROW_UNITS, ROW_OUTER_RANK = 16, 64, 3


@cube.kernel
def gather_kernel(x: cube.Array, index: cube.Array, out: cube.Array, layout: cube.Array[cube.i32],
                  dim: cube.Comptime[int], ndim: cube.Comptime[int]):
    """layout = [index shape, x strides, index strides]; out has index's shape."""
    p = cube.ABSOLUTE_POS
    if p < len(out):
        c = unravel(p, layout, ndim)
        j = cube.i32(index[dot(c, layout, 2 * ndim)])
        at = tuple(j if d == dim else c[d] for d in range(ndim))
        out[p] = x[dot(at, layout, ndim)]


@cube.kernel
def scatter_kernel(out: cube.Array, index: cube.Array, src: cube.Array, layout: cube.Array[cube.i32],
                   n: cube.i32, dim: cube.Comptime[int], ndim: cube.Comptime[int],
                   add: cube.Comptime[bool], select_mode: cube.Comptime[bool]):
    """One unit per index element (scatter) or source element (index_add, `select_mode`).

    layout = [iteration shape, out strides, index strides, src strides].
    """
    p = cube.ABSOLUTE_POS
    if p < n:
        c = unravel(p, layout, ndim)
        j = cube.i32(index[c[dim] if select_mode else dot(c, layout, 2 * ndim)])
        at = tuple(j if d == dim else c[d] for d in range(ndim))
        target = dot(at, layout, ndim)
        value = src[dot(c, layout, 3 * ndim)]
        if add:
            cube.atomic_add(out, target, value)
        else:
            out[target] = value


@cube.kernel
def scatter_rows_kernel(out: cube.Array, index: cube.Array, src: cube.Array, layout: cube.Array[cube.i32],
                        outer: cube.Comptime[int], units: cube.Comptime[int]):
    """A plain scatter along the last dim, a cube per row of `index`: the row's offsets in out, index and
    src are found once, then the units walk the row (the last chunk shifted back inside: no masked lane,
    a few identical writes twice; a long row is cut in parts, `common.row_span`). layout = [outer shape,
    out / index / src outer strides (`outer` each), row length, out / index / src strides along the row,
    parts per row]."""
    at = 4 * outer
    row, lo, hi = row_span(layout[at + 4], layout[at], cube.CUBE_POS)
    o = offset(row, layout, outer, 0)
    i0 = offset(row, layout, outer, 1)
    s0 = offset(row, layout, outer, 2)
    for j0 in range(lo, hi, units):
        j = cube.min(j0, hi - units) + cube.UNIT_POS_X
        out[o + cube.i32(index[i0 + j * layout[at + 2]]) * layout[at + 1]] = src[s0 + j * layout[at + 3]]


@cube.function
def add_slice_row(out, index, src, o, s, r, inner):
    """out[o + index[r] * inner] += src[s + r * inner]: one column of index_add's slice r."""
    at = o + cube.i32(index[r]) * inner
    out[at] = out[at] + out.dtype(src[s + r * inner])


@cube.kernel
def index_add_columns_kernel(out: cube.Array, index: cube.Array, src: cube.Array, rows: cube.i32, size: cube.i32,
                             inner: cube.i32):
    """index_add of `rows` slices of `inner` contiguous elements: a unit per column, walking the index in
    its order, so each output element has one owner (no atomics, a fixed order of the adds). Cube (x, y):
    columns from x * CUBE_DIM of outer slice y (out: `size` slices of it, src: `rows`); whole cubes
    unguarded, the last one of a slice testing each column."""
    col = cube.CUBE_POS_X * cube.CUBE_DIM + cube.UNIT_POS_X
    o = cube.CUBE_POS_Y * size * inner + col
    s = cube.CUBE_POS_Y * rows * inner + col
    if (cube.CUBE_POS_X + 1) * cube.CUBE_DIM <= inner:
        for r in range(rows):
            add_slice_row(out, index, src, o, s, r, inner)
    else:
        for r in range(rows):
            if col < inner:
                add_slice_row(out, index, src, o, s, r, inner)


@cube.kernel
def index_select_rows_kernel(x: cube.Array, index: cube.Array, out: cube.Array, rows: cube.i32, size: cube.i32,
                             inner: cube.i32, units: cube.Comptime[int]):
    """index_select of slices of `inner` contiguous elements: cube y copies output slice y (row y % rows of
    outer slice y // rows), its units walking it CUBE_DIM at a time, the last step shifted back inside
    (a few elements copied twice; C target). `units` is the cube dim."""
    r = cube.CUBE_POS_Y % rows
    outer = cube.CUBE_POS_Y // rows
    src = (outer * size + cube.i32(index[r])) * inner
    dst = cube.CUBE_POS_Y * inner
    for c0 in range(0, inner, units):
        c = cube.min(c0, inner - units) + cube.UNIT_POS_X
        out[dst + c] = x[src + c]


@cube.kernel
def index_select_kernel(x: cube.Array, index: cube.Array, out: cube.Array, layout: cube.Array[cube.i32],
                        dim: cube.Comptime[int], ndim: cube.Comptime[int]):
    """layout = [out shape, x strides]."""
    p = cube.ABSOLUTE_POS
    if p < len(out):
        c = unravel(p, layout, ndim)
        j = cube.i32(index[c[dim]])
        out[p] = x[dot(tuple(j if d == dim else c[d] for d in range(ndim)), layout, ndim)]


def _layout(shape, *arrays) -> np.ndarray:
    parts = list(shape)
    for a in arrays:
        parts += list(element_strides(a))
    return np.asarray(parts, np.int32)


def _launch(kernel, n, /, *args, **comptime):
    count, dim = grid(n)
    kernel.launch(count, dim, *args, **comptime)


def _check_bounds(op: str, index: np.ndarray, size: int, dim: int) -> None:
    if not index.size:
        return
    if isinstance(index, DeviceArray):
        # Bounds known on the host (uploaded data, or vouched for) spare a read, which would wait for
        # every launch queued so far; when they are out of range the values themselves decide.
        known = index.bounds
        if known is not None and known[0] >= 0 and known[1] < size:
            return
        index = index.numpy()
    low, high = index.min(), index.max()
    if low < 0 or high >= size:
        raise IndexError(f"{op}: index {low if low < 0 else high} is out of bounds for dim {dim} with size {size}")


def gather(x: np.ndarray, index: np.ndarray, dim: int) -> np.ndarray:
    """out[i][j] = x[index[i][j]][j] (dim 0) / x[i][index[i][j]] (dim 1), for any rank."""
    x, index = asarray(x), asarray(index)
    dim = dim % max(x.ndim, 1)
    if index.ndim != x.ndim or any(i != dim and index.shape[i] > x.shape[i] for i in range(x.ndim)):
        raise ShapeError("gather", f"index of shape {index.shape} does not fit input {x.shape} at dim {dim}")
    if x.ndim == 0:
        return x.copy()
    _check_bounds("gather", index, x.shape[dim], dim)
    out = empty(index.shape, x.dtype, x, index)
    check_size("gather", x, index)
    _launch(gather_kernel, out.size, x, index, out, _layout(index.shape, x, index), dim=dim,
            ndim=x.ndim)
    return out


def index_select(x: np.ndarray, index: np.ndarray, dim: int) -> np.ndarray:
    """The slices of `x` along `dim` named by the 1-D `index`, in its order."""
    x, index = asarray(x), asarray(index)
    if index.ndim != 1:
        raise ShapeError("index_select", f"index must be 1-D, got shape {index.shape}")
    if x.ndim == 0:
        return np.broadcast_to(x, index.shape).copy()
    dim = dim % x.ndim
    _check_bounds("index_select", index, x.shape[dim], dim)
    out = empty(x.shape[:dim] + index.shape + x.shape[dim + 1:], x.dtype, x, index)
    check_size("index_select", x, out)
    inner = int(np.prod(x.shape[dim + 1:], dtype=np.int64))
    if inner >= COLUMNS_MIN and out.size and launch_runtime(x, index).target == "cpu":
        units = min(COLUMN_UNITS, 1 << (inner.bit_length() - 1))  # a power of two <= the slice
        index_select_rows_kernel.launch(cube.CubeCount(1, out.size // inner), cube.CubeDim(units), contiguous(x),
                                        contiguous(index), out, index.shape[0], x.shape[dim], inner, units=units)
    else:
        _launch(index_select_kernel, out.size, x, index, out, _layout(out.shape, x), dim=dim, ndim=x.ndim)
    return out


def scatter(x: np.ndarray, index: np.ndarray, src: np.ndarray, dim: int, reduce: str | None = None):
    """A copy of `x` with src[p] written (or added, `reduce="add"`) at index[p] along `dim`."""
    x, index, src = asarray(x), asarray(index), asarray(src)
    dim = dim % max(x.ndim, 1)
    if index.ndim != x.ndim or src.ndim != x.ndim or any(
            index.shape[i] > src.shape[i] or (i != dim and index.shape[i] > x.shape[i]) for i in range(x.ndim)):
        raise ShapeError("scatter", f"index {index.shape} does not fit input {x.shape} and source "
                                    f"{src.shape} at dim {dim}")
    if x.ndim == 0:
        return src.copy() if reduce is None else x + src
    _check_bounds("scatter", index, x.shape[dim], dim)
    return _scatter_into(x, index, src, dim, reduce == "add", index.shape, select_mode=False)


def index_add(x: np.ndarray, index: np.ndarray, src: np.ndarray, dim: int) -> np.ndarray:
    """A copy of `x` with src's slices added at the positions `index` names along `dim`."""
    x, index, src = asarray(x), asarray(index), asarray(src)
    if x.ndim == 0:
        return x + src.sum()
    dim = dim % x.ndim
    if index.ndim != 1 or src.shape != x.shape[:dim] + index.shape + x.shape[dim + 1:]:
        raise ShapeError("index_add", f"source {src.shape} does not fit input {x.shape} with index "
                                      f"{index.shape} at dim {dim}")
    _check_bounds("index_add", index, x.shape[dim], dim)
    inner = int(np.prod(x.shape[dim + 1:], dtype=np.int64))
    if inner >= COLUMNS_MIN and x.dtype.name in ATOMIC_DTYPES and src.dtype == x.dtype \
            and launch_runtime(x, index, src).target == "cpu":
        return _index_add_columns(x, index, src, dim, inner)
    return _scatter_into(x, index, src, dim, True, src.shape, select_mode=True)


def _index_add_columns(x, index, src, dim: int, inner: int):
    """`index_add` by `index_add_columns_kernel` (the C target's; see COLUMNS_MIN)."""
    out = copy_as(x, x.dtype)
    check_size("index_add", out, src, index)
    outer = int(np.prod(x.shape[:dim], dtype=np.int64))
    if src.size:
        units = min(COLUMN_UNITS, 1 << (inner.bit_length() - 1))  # a power of two <= the slice
        index_add_columns_kernel.launch(cube.CubeCount(-(-inner // units), outer), cube.CubeDim(units), out,
                                        contiguous(index), contiguous(src), index.shape[0], x.shape[dim], inner)
    return out


def _scatter_rows(out, index, src, shape) -> None:
    """`scatter_rows_kernel` over the rows of `shape` (index's shape; the scatter is along its last dim)."""
    pad = max(0, ROW_OUTER_RANK - (len(shape) - 1))
    parts = [1] * pad + list(shape[:-1])
    for a in (out, index, src):
        parts += [0] * pad + list(element_strides(a)[:-1])
    chunks = row_chunks(shape[-1])
    parts += [shape[-1]] + [element_strides(a)[-1] for a in (out, index, src)] + [chunks]
    units = min(ROW_UNITS, 1 << (shape[-1].bit_length() - 1))  # a power of two <= the row length
    cubes = int(np.prod(shape[:-1], dtype=np.int64)) * chunks
    scatter_rows_kernel.launch(cube.CubeCount(cubes), cube.CubeDim(units), out, index, src,
                               np.asarray(parts, np.int32), outer=pad + len(shape) - 1, units=units)


def _scatter_into(x, index, src, dim, add, shape, select_mode):
    # Atomics exist for 32/64-bit types only: add others in f64 or i64 and convert back.
    wide = x.dtype if not add or x.dtype.name in ATOMIC_DTYPES else \
        np.dtype(np.float64 if x.dtype.kind in "fV" else np.int64)
    out = copy_as(x, wide)
    src = src.astype(wide, copy=False)
    n = int(np.prod(shape, dtype=np.int64))
    check_size("scatter", out, src, index)
    if n and not add and not select_mode and dim == x.ndim - 1 and shape[-1] >= ROW_MIN:
        _scatter_rows(out, index, src, shape)
    elif n:
        if select_mode:  # a 1-D index read at c[dim]: contiguous, and no strides in the layout
            index = contiguous(index)
            layout = np.concatenate([_layout(shape, out), np.zeros(x.ndim, np.int32), _layout((), src)])
        else:
            layout = _layout(shape, out, index, src)
        _launch(scatter_kernel, n, out, index, src, layout, n, dim=dim, ndim=x.ndim, add=add,
                select_mode=select_mode)
    return out.astype(x.dtype, copy=False)
