"""Batched matmul: register-blocked, with transposes and broadcasting folded into indexing.

A cube computes a tile of `rows` x `units` outputs of one batch entry: unit u owns one column and
keeps `rows` accumulators (a comptime-sized tuple), so each element of B it loads is used `rows`
times, and each element of A is loaded once per cube and shared by all its units. Inputs are read
through their strides, so `a.T` or `b[..., ::2]` need no copy; batch dims broadcast through a layout
of batch strides (0 where an operand is broadcast). The k loop has uniform bounds, which on the C
target puts the unit loop innermost (B's row is read across units: a vector load when B's n-stride
is 1, a comptime fast path).

Example:
    >>> matmul(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32))
    array([[3., 3., 3., 3.],
           [3., 3., 3., 3.]], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from ... import cube
from ...dtype import f32
from ...errors import DTypeError, ShapeError
from .common import check_size, cube_dtype, element_strides, offset

ROWS, UNITS, DEPTH = 8, 128, 16  # best of a small sweep (2 cores, AVX-512); autotuning should pick these


@cube.function
def fma_step(a, b, acc, a_base, m0, b_col, kk, sam, sak, sbk, T, rows):
    """acc[r] += A[m0 + r, kk] * B[kk, col] for every row r of the tile."""
    bv = T(b[b_col + kk * sbk])
    return tuple(acc[r] + T(a[a_base + (m0 + r) * sam + kk * sak]) * bv for r in range(rows))


@cube.kernel
def matmul_kernel(a: cube.Array, b: cube.Array, out: cube.Array, batch: cube.Array[cube.i32],
                  m: cube.i32, n: cube.i32, k: cube.i32, sam: cube.i32, sak: cube.i32, sbk: cube.i32,
                  sbn: cube.i32, T: cube.Comptime, bdim: cube.Comptime[int], rows: cube.Comptime[int],
                  units: cube.Comptime[int], b_unit_n: cube.Comptime[bool], depth: cube.Comptime[int]):
    z = cube.CUBE_POS_Z
    a_base = offset(z, batch, bdim, 0)
    b_base = offset(z, batch, bdim, 1)
    # The last tile along each axis is shifted back to end at the edge (the host guarantees
    # m >= rows and n >= units), so no unit ever reads or writes out of range. Shifted tiles overlap
    # their neighbours and write the same values twice, which is harmless.
    m0 = cube.min(cube.CUBE_POS_Y * rows, m - rows)
    col = cube.min(cube.CUBE_POS_X * units, n - units) + cube.UNIT_POS_X
    b_col = b_base + col * (1 if b_unit_n else sbn)
    acc = tuple(T(0) for _ in range(rows))
    k_main = k - k % depth
    for k0 in range(0, k_main, depth):  # `depth` k-steps per trip: accumulators stay in registers
        for kk in cube.unroll(range(depth)):
            acc = fma_step(a, b, acc, a_base, m0, b_col, k0 + kk, sam, sak, sbk, T, rows)
    for kk in range(k_main, k):
        acc = fma_step(a, b, acc, a_base, m0, b_col, kk, sam, sak, sbk, T, rows)
    o_base = z * m * n + m0 * n + col
    for r in cube.unroll(range(rows)):
        out[o_base + r * n] = out.dtype(acc[r])


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`a @ b` with NumPy's rules: batch dims broadcast, 1-D operands gain and lose a dim.

    Accumulates f16/bf16 in f32; other dtypes in themselves. `a` and `b` must share a dtype.

    Example:
        >>> matmul(np.eye(2, dtype=np.float32), np.arange(2, dtype=np.float32))
        array([0., 1.], dtype=float32)
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError("matmul", f"needs at least 1-D operands, got {a.shape} and {b.shape}")
    if a.dtype != b.dtype:
        raise DTypeError(f"matmul: operands must share a dtype, got {a.dtype} and {b.dtype}")
    t = cube_dtype(a.dtype)
    if t is cube.bool_:
        raise DTypeError("matmul: bool operands are not supported")
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    (m, ka), (kb, n) = a2.shape[-2:], b2.shape[-2:]
    if ka != kb:
        raise ShapeError("matmul", f"inner dims differ: {a.shape} @ {b.shape}")
    try:
        batch_shape = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    except ValueError:
        raise ShapeError("matmul", f"batch dims do not broadcast: {a.shape} @ {b.shape}") from None
    out = np.empty(batch_shape + (m, n), a.dtype)
    check_size("matmul", a, b, out)
    if out.size:
        if ka == 0:
            out[...] = 0
        else:
            _launch(a2, b2, out, batch_shape, m, n, ka, t)
    if a.ndim == 1:
        out = out[..., 0, :]
    if b.ndim == 1:
        out = out[..., 0]
    return out


def _launch(a, b, out, batch_shape, m, n, k, t) -> None:
    sa, sb = element_strides(a), element_strides(b)
    layout = np.asarray(list(batch_shape) + _batch_strides(batch_shape, a) + _batch_strides(batch_shape, b),
                        np.int32)
    nbatch = int(np.prod(batch_shape, dtype=np.int64))
    rows, units = min(ROWS, m), min(UNITS, n)
    count = cube.CubeCount(-(-n // units), -(-m // rows), nbatch)
    matmul_kernel.launch(count, cube.CubeDim(units), a, b, out, layout, m, n, k, sa[-2], sa[-1], sb[-2],
                         sb[-1], T=f32 if t.itemsize < 4 and t.is_float else t, bdim=len(batch_shape),
                         rows=rows, units=units, b_unit_n=sb[-1] == 1, depth=DEPTH)


def _batch_strides(batch_shape: tuple, x: np.ndarray) -> list:
    """x's strides over the batch dims (0 where broadcast), from a view holding only those dims."""
    pad = len(batch_shape) - (x.ndim - 2)
    strides = [0] * pad
    for size, dim, stride in zip(batch_shape[pad:], x.shape[:-2], element_strides(x)[:-2]):
        strides.append(0 if dim == 1 and size != 1 else stride)
    return strides
