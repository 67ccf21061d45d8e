"""Blocks of a batch of matrices, and the updates the blocked algorithms make of them.

A `Block` names rows [r, r + rows) and columns [c, c + cols) of every matrix of a C-contiguous batch
`x` (count, M, N), possibly transposed; kernels get it as a flat array, an element offset and the
strides, matmuls as a view (`block.view()`, NumPy or device array). `gemm_update(c, a, b)` is the
trailing update of every blocked algorithm, C -= A B: the product by `tuned_matmul` (the CPU's BLAS or
a cube kernel, whichever the autotuner picked; a cube kernel on wgpu; tensor cores or cuBLAS on CUDA),
subtracted by a cube kernel. `swap_rows` applies LU's row interchanges to a range of columns.

Example:
    >>> x = np.arange(12.0).reshape(1, 3, 4)     # x[0, 1:, :2] -= x[0, 1:, 2:3] @ x[0, :1, :2]
    >>> gemm_update(Block(x, 1, 0, 2, 2), Block(x, 1, 2, 2, 1), Block(x, 0, 0, 1, 2))
    >>> x[0, 1:, :2].tolist()
    [[4.0, -1.0], [8.0, -1.0]]
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .. import cube
from ..kernels.common import contiguous, empty
from ..kernels.matmul import tuned_matmul
from .kernels import lanes

UNITS = 128  # units per cube of the row-wise update kernels


class Block(NamedTuple):
    """Rows [r, r + rows) and columns [c, c + cols) of each matrix of `x` (count, M, N); its transpose when
    `t` (rows and cols are then the transpose's)."""

    x: object
    r: int
    c: int
    rows: int
    cols: int
    t: bool = False

    @property
    def T(self) -> "Block":  # noqa: N802 (NumPy's name)
        return self._replace(rows=self.cols, cols=self.rows, t=not self.t)

    def at(self, i: int, j: int, rows: int, cols: int) -> "Block":
        """The sub-block of `rows` x `cols` from (i, j), in this block's own orientation."""
        di, dj = (j, i) if self.t else (i, j)
        sub = self._replace(r=self.r + di, c=self.c + dj)
        return sub._replace(rows=rows, cols=cols)

    @property
    def flat(self):
        return self.x.reshape(-1)

    @property
    def count(self) -> int:
        return self.x.shape[0]

    @property
    def ld(self) -> int:
        return self.x.shape[2]

    @property
    def stride(self) -> int:
        """Elements between matrices of the batch."""
        return self.x.shape[1] * self.x.shape[2]

    @property
    def offset(self) -> int:
        return self.r * self.ld + self.c

    @property
    def strides(self) -> tuple[int, int]:
        """(row, column) strides in elements, in this block's orientation."""
        return (1, self.ld) if self.t else (self.ld, 1)

    def view(self):
        """The (count, rows, cols) view of x (NumPy or device array) for a matmul."""
        rows, cols = (self.cols, self.rows) if self.t else (self.rows, self.cols)
        v = self.x[:, self.r:self.r + rows, self.c:self.c + cols]
        return v.transpose(0, 2, 1) if self.t else v

    @property
    def empty(self) -> bool:
        return not (self.rows and self.cols and self.count)


@cube.kernel
def subtract_kernel(x: cube.Array, p: cube.Array, offset: cube.i32, ld: cube.i32, stride: cube.i32,
                    rows: cube.i32, cols: cube.i32, tile: cube.Comptime[int], units: cube.Comptime[int]):
    """x[offset + i ld + j] -= p[i, j] in every matrix: cube (matrix, tile of `tile` rows), its units
    sharing each row."""
    b = cube.CUBE_POS_X
    r0 = cube.CUBE_POS_Y * tile
    for i in range(r0, cube.min(r0 + tile, rows)):
        at = b * stride + offset + i * ld
        at_p = (b * rows + i) * cols
        for j in range(cube.UNIT_POS, cols, units):
            x[at + j] = x[at + j] - p[at_p + j]


def gemm_update(c: Block, a: Block, b: Block) -> None:
    """C -= A B for blocks of batches of one count (C's x is written in place)."""
    if c.t:
        return gemm_update(c.T, b.T, a.T)
    if c.empty or not a.cols:
        return None
    p = contiguous(tuned_matmul(a.view(), b.view()))
    units = lanes(c.x, UNITS)
    tile = _row_tile(c.rows, c.cols)
    subtract_kernel.launch(cube.CubeCount(c.count, -(-c.rows // tile)), cube.CubeDim(units), c.flat, p.reshape(-1),
                           c.offset, c.ld, c.stride, c.rows, c.cols, tile=tile, units=units)
    return None


def _row_tile(rows: int, cols: int) -> int:
    """Rows per cube of a row-wise kernel: about 64K elements a cube, a power of two (few variants), so that
    a small update runs on one thread (a parallel region costs more than it saves there, and much more
    when another process holds a core)."""
    return max(1, min(256, 1 << max(0, (65536 // max(cols, 1)).bit_length() - 1)))


@cube.kernel
def swap_kernel(x: cube.Array, piv: cube.Array[cube.i32], ld: cube.i32, stride: cube.i32, k0: cube.i32,
                k1: cube.i32, c0: cube.i32, cols: cube.i32, kmax: cube.i32, tile: cube.Comptime[int],
                units: cube.Comptime[int]):
    """Rows k and piv[k] - 1 of columns [c0, c0 + cols) swapped for k = k0 .. k1 - 1 in turn, per matrix
    (LAPACK's laswp): cube (matrix, tile of `tile` columns), its units sharing the tile."""
    b = cube.CUBE_POS_X
    j0 = c0 + cube.CUBE_POS_Y * tile
    j1 = cube.min(j0 + tile, c0 + cols)
    for k in range(k0, k1):
        p = piv[b * kmax + k] - 1
        at_k = b * stride + k * ld
        at_p = b * stride + p * ld
        for j in range(j0 + cube.UNIT_POS, j1, units):
            xk = x[at_k + j]
            x[at_k + j] = x[at_p + j]
            x[at_p + j] = xk


def swap_rows(x, piv, k0: int, k1: int, c0: int, c1: int) -> None:
    """Apply the interchanges piv[:, k0:k1] (1-based rows, as LAPACK's) to columns [c0, c1) of each matrix
    of x (count, M, N); piv is (count, kmax)."""
    count, _, n = x.shape
    cols = c1 - c0
    if count and cols > 0 and k1 > k0:
        units = lanes(x, UNITS)
        tile = max(256, -(-65536 // (k1 - k0))) if units == 1 else units
        swap_kernel.launch(cube.CubeCount(count, -(-cols // tile)), cube.CubeDim(units), x.reshape(-1),
                           piv.reshape(-1), n, x.shape[1] * n, k0, k1, c0, cols, piv.shape[-1], tile=tile,
                           units=units)


@cube.kernel
def transpose_kernel(src: cube.Array, dst: cube.Array, rows: cube.i32, cols: cube.i32, tile: cube.Comptime[int],
                     units: cube.Comptime[int]):
    """dst (count, cols, rows) = src (count, rows, cols) transposed: cube (matrix, row tile, column tile),
    each a `tile` x `tile` square that stays in cache while its rows are read and its columns written."""
    b = cube.CUBE_POS_X
    i0 = cube.CUBE_POS_Y * tile
    j0 = cube.CUBE_POS_Z * tile
    i1 = cube.min(i0 + tile, rows)
    for j in range(j0, cube.min(j0 + tile, cols)):
        for i in range(i0 + cube.UNIT_POS, i1, units):
            dst[(b * cols + j) * rows + i] = src[(b * rows + i) * cols + j]


def transposed_copy(x, out=None):
    """x (..., rows, cols) transposed into a C-contiguous (..., cols, rows): `out` when given, else a new one."""
    x = contiguous(x)
    *batch, rows, cols = x.shape
    out = empty(tuple(batch) + (cols, rows), x.dtype, x) if out is None else out
    count = math.prod(batch)
    if count and rows and cols:
        tile = 32
        units = lanes(x, tile)
        transpose_kernel.launch(cube.CubeCount(count, -(-rows // tile), -(-cols // tile)), cube.CubeDim(units),
                                x.reshape(-1), out.reshape(-1), rows, cols, tile=tile, units=units)
    return out


def halves(n: int, leaf: int) -> int:
    """Where a recursive algorithm splits `n` rows or columns: a multiple of `leaf` near the middle, so that
    the leaves are full but the last."""
    return leaf * max(1, math.ceil(n / leaf) // 2)
