"""Batched matmul: register-blocked, with transposes and broadcasting folded into indexing; autotuned
against NumPy's BLAS.

A cube computes a tile of `rows` x `units` outputs of one batch entry: unit u owns one column and
keeps `rows` accumulators (a comptime-sized tuple), so each element of B it loads is used `rows`
times, and each element of A is loaded once per cube and shared by all its units. Row tiles are the
fastest cube axis, so the cubes one thread runs in turn share B's column panel (kept in L2). Inputs are
read through their strides, so `a.T` or `b[..., ::2]` need no copy; batch dims broadcast through a
layout of batch strides (0 where an operand is broadcast). The k loop has uniform bounds, which on the
C target puts the unit loop innermost (B's row is read across units: a vector load when B's n-stride
is 1, a comptime fast path), `depth` k-steps unrolled per trip (FMA on vectors of units).

`tuned_matmul` is what backends call: an `Autotuner` (per-device cache) over NumPy's BLAS (driven on
the kernels' OpenMP threads, runtime/blas.py) and the kernel's tile variants (`TILES`) for f32/f64;
other dtypes always run the kernel.

Example:
    >>> matmul(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32))
    array([[3., 3., 3., 3.],
           [3., 3., 3., 3.]], dtype=float32)
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import numpy as np

from .. import cube
from ..dtype import f32
from ..errors import DTypeError, ShapeError
from ..cube.runtime.autotune import anchor
from .common import asarray, check_size, cube_dtype, empty, zeros
from .layout import element_strides, offset


class Tile(NamedTuple):
    """A tiling of the kernel: `rows` x `units` outputs per cube, `depth` k-steps unrolled per trip, and
    k in launches of `kc` (0: all of k in one), which keeps B's panel of a cube column in L2. The
    launches after the first add to the output, so they are used only where no tile overlaps (m and n
    multiples of the tile) and the output holds the accumulator type."""

    rows: int
    units: int
    depth: int
    kc: int = 0


# The variants the autotuner times; the first is the default (the best of a sweep on 2 AVX2 cores).
TILES = {"cube_8x128": Tile(8, 128, 8), "cube_8x128_k256": Tile(8, 128, 8, 256), "cube_8x64": Tile(8, 64, 8),
         "cube_8x256": Tile(8, 256, 8), "cube_12x128": Tile(12, 128, 8), "cube_4x256": Tile(4, 256, 8)}
DEFAULT_TILE = TILES["cube_8x128"]


@cube.function
def fma_step(a, b, acc, a_base, m0, b_col, kk, sam, sak, sbk, T, rows):
    """acc[r] += A[m0 + r, kk] * B[kk, col] for every row r of the tile."""
    bv = T(b[b_col + kk * sbk])
    return tuple(acc[r] + T(a[a_base + (m0 + r) * sam + kk * sak]) * bv for r in range(rows))


@cube.kernel
def matmul_kernel(a: cube.Array, b: cube.Array, out: cube.Array, batch: cube.Array[cube.i32],
                  m: cube.i32, n: cube.i32, k0: cube.i32, k1: cube.i32, sam: cube.i32, sak: cube.i32,
                  sbk: cube.i32, sbn: cube.i32, T: cube.Comptime, bdim: cube.Comptime[int],
                  rows: cube.Comptime[int], units: cube.Comptime[int], b_unit_n: cube.Comptime[bool],
                  depth: cube.Comptime[int], accumulate: cube.Comptime[bool]):
    """out (+)= a[..., k0:k1] @ b[..., k0:k1, :] (adding to out when `accumulate`)."""
    z = cube.CUBE_POS_Z
    a_base = offset(z, batch, bdim, 0)
    b_base = offset(z, batch, bdim, 1)
    # The last tile along each axis is shifted back to end at the edge (the host guarantees
    # m >= rows and n >= units), so no unit ever reads or writes out of range. Shifted tiles overlap
    # their neighbours and write the same values twice, which is harmless (the host accumulates
    # only when no tile overlaps).
    m0 = cube.min(cube.CUBE_POS_X * rows, m - rows)
    col = cube.min(cube.CUBE_POS_Y * units, n - units) + cube.UNIT_POS_X
    b_col = b_base + col * (1 if b_unit_n else sbn)
    o_base = z * m * n + m0 * n + col
    if accumulate:
        acc = tuple(T(out[o_base + r * n]) for r in range(rows))
    else:
        acc = tuple(T(0) for _ in range(rows))
    k_main = k1 - (k1 - k0) % depth
    for kb in range(k0, k_main, depth):  # `depth` k-steps per trip: accumulators stay in registers
        for kk in cube.unroll(range(depth)):
            acc = fma_step(a, b, acc, a_base, m0, b_col, kb + kk, sam, sak, sbk, T, rows)
    for kk in range(k_main, k1):
        acc = fma_step(a, b, acc, a_base, m0, b_col, kk, sam, sak, sbk, T, rows)
    for r in cube.unroll(range(rows)):
        out[o_base + r * n] = out.dtype(acc[r])


def matmul(a: np.ndarray, b: np.ndarray, tile: Tile = DEFAULT_TILE) -> np.ndarray:
    """`a @ b` with NumPy's rules: batch dims broadcast, 1-D operands gain and lose a dim.

    Accumulates f16/bf16 in f32; other dtypes in themselves. `a` and `b` must share a dtype. `tile`
    picks the kernel variant (`TILES`).

    Example:
        >>> matmul(np.eye(2, dtype=np.float32), np.arange(2, dtype=np.float32))
        array([0., 1.], dtype=float32)
    """
    a, b = asarray(a), asarray(b)
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
    out = (zeros if ka == 0 else empty)(batch_shape + (m, n), a.dtype, a, b)
    check_size("matmul", a, b, out)
    if out.size and ka:
        _launch(a2, b2, out, batch_shape, m, n, ka, t, tile)
    if a.ndim == 1:
        out = out[..., 0, :]
    if b.ndim == 1:
        out = out[..., 0]
    return out


BLAS_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
TUNE_MIN_FLOPS = 2 * 128 ** 3  # below this BLAS wins anyway and timing would cost more than it saves
TILE_MARGIN = 0.15  # a tile must take under 85% of BLAS's time to replace it (autotune's `margin`)


def tuned_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`matmul(a, b)` by the fastest of NumPy's BLAS and the kernel's tile variants for this shape class.

    f32/f64 NumPy operands go through `matmul_tuner()` (decisions cached per device; `[autotune]
    level` minimal always takes BLAS, balanced times BLAS and the default tile, extensive and full
    every tile); other dtypes and device arrays run the kernel with its default tile.

    Example:
        >>> tuned_matmul(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)).shape
        (2, 4)
    """
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype and a.dtype in BLAS_DTYPES:
        return matmul_tuner()(a, b)
    from .matmul_tc import cuda_matmul  # CUDA arrays: tensor cores or cuBLAS where they apply
    out = cuda_matmul(a, b)
    return matmul(a, b) if out is None else out


_tuner = None


def matmul_tuner():
    """The process's matmul `Autotuner` on the CPU's persistent cache (built on first use).

    Example:
        >>> a = np.ones((256, 256), np.float32)
        >>> matmul_tuner().choose(a, a)        # timed once per shape class, then cached
        'blas'
    """
    global _tuner
    if _tuner is None:
        from ..cube.runtime.autotune import Autotuner, device_cache
        candidates = {"blas": _blas_matmul(), **{name: partial(matmul, tile=tile) for name, tile in TILES.items()}}
        tiers = {name: "extensive" for name in TILES if TILES[name] != DEFAULT_TILE}
        _tuner = Autotuner("matmul", candidates, key=matmul_key, cache=device_cache("cpu"), tiers=tiers,
                           worth=lambda a, b: _flops(a, b) >= TUNE_MIN_FLOPS, margin=TILE_MARGIN)
    return _tuner


def _blas_matmul():
    """NumPy's OpenBLAS on the kernels' thread pool (runtime/blas.py), else plain `np.matmul`."""
    from ..cube.runtime.blas import host_blas
    blas = host_blas()
    return np.matmul if blas is None else blas.matmul


def summed_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`(a @ b).sum(0)` for f32/f64 NumPy batches (N, M, K) @ (N, K, P): the host BLAS accumulates each
    thread's run of the batch in place (`HostBlas.matmul_sum`), so the N products are never stored.

    Example:
        >>> summed_matmul(np.ones((3, 2, 4), np.float32), np.ones((3, 4, 5), np.float32))[0, 0]
        12.0
    """
    from ..cube.runtime.blas import host_blas
    blas = host_blas()
    return np.add.reduce(np.matmul(a, b), 0) if blas is None else blas.matmul_sum(a, b)


def blas_mode() -> str:
    """How BLAS runs: the host BLAS's name and the threads its GEMMs are split over (a decision timed on
    two threads does not hold on one), or "numpy" (`np.matmul`, OpenBLAS's own threads)."""
    from ..cube.runtime.blas import host_blas
    blas = host_blas()
    return "numpy" if blas is None else f"{blas.name}:{blas.threads()}"


def matmul_key(a: np.ndarray, b: np.ndarray) -> tuple:
    """The shape class of `a @ b`: batch, m, n, k anchored to powers of two, the dtype, how each
    operand is laid out (rows contiguous, columns contiguous, or strided), and how BLAS runs
    (`blas_mode`: a decision timed against OpenBLAS's own threads does not hold for the OpenMP-driven
    one, nor one timed on two threads for one).

    Example:
        >>> matmul_key(np.ones((1000, 64), np.float32), np.ones((64, 3), np.float32).T.T)
        (1, 1024, 4, 64, 'float32', 'rows', 'rows', 'libscipy_openblas64_+openmp:2')
    """
    blas = blas_mode()
    seen = (a.shape, a.strides, a.dtype, b.shape, b.strides, b.dtype, blas)  # b's layout reads its itemsize
    key = _keys.get(seen)
    if key is None:
        m = a.shape[-2] if a.ndim > 1 else 1
        n = b.shape[-1] if b.ndim > 1 else 1
        batch = math.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
        key = (anchor(batch), anchor(m), anchor(n), anchor(a.shape[-1]), str(a.dtype), _layout(a), _layout(b), blas)
        if len(_keys) >= 1024:  # many layouts seen: start over
            _keys.clear()
        _keys[seen] = key
    return key


_keys: dict[tuple, tuple] = {}
"""`matmul_key` by the operands' shapes, strides and dtypes: a training step asks for the same few at every
GEMM, and making the key (broadcast_shapes, the dtype's name) costs more host time than looking it up."""


def _layout(x: np.ndarray) -> str:
    if x.ndim < 2 or x.strides[-1] == x.itemsize:
        return "rows"
    return "columns" if x.strides[-2] == x.itemsize else "strided"


def _flops(a: np.ndarray, b: np.ndarray) -> int:
    n = b.shape[-1] if b.ndim > 1 else 1
    return 2 * (a.size // max(1, a.shape[-1])) * a.shape[-1] * n


def _launch(a, b, out, batch_shape, m, n, k, t, tile: Tile) -> None:
    sa, sb = element_strides(a), element_strides(b)
    layout = np.asarray(list(batch_shape) + _batch_strides(batch_shape, a) + _batch_strides(batch_shape, b),
                        np.int32)
    nbatch = int(np.prod(batch_shape, dtype=np.int64))
    rows, units = min(tile.rows, m), min(tile.units, n)
    count = cube.CubeCount(-(-m // rows), -(-n // units), nbatch)
    acc_t = f32 if t.itemsize < 4 and t.is_float else t
    chunked = tile.kc and k > tile.kc and m % rows == 0 and n % units == 0 and acc_t is t
    step = tile.kc if chunked else k
    for k0 in range(0, k, step):
        matmul_kernel.launch(count, cube.CubeDim(units), a, b, out, layout, m, n, k0, min(k, k0 + step),
                             sa[-2], sa[-1], sb[-2], sb[-1], T=acc_t, bdim=len(batch_shape), rows=rows, units=units,
                             b_unit_n=sb[-1] == 1, depth=tile.depth, accumulate=k0 > 0)


def _batch_strides(batch_shape: tuple, x: np.ndarray) -> list:
    """x's strides over the batch dims (0 where broadcast), from a view holding only those dims."""
    pad = len(batch_shape) - (x.ndim - 2)
    strides = [0] * pad
    for size, dim, stride in zip(batch_shape[pad:], x.shape[:-2], element_strides(x)[:-2]):
        strides.append(0 if dim == 1 and size != 1 else stride)
    return strides
