"""Matmul on matrix units (tensor cores): f16/bf16 inputs, or f32 computed as tf32, accumulated in f32.

A cube computes a `bm x bn` tile of one batch entry (tiles are handed out in groups of `group` tile
rows, column by column, so that the cubes running together share panels of A and B in L2) with `(bm / wm) * (bn / wn)` planes (warps of 32
units); each plane owns a `wm x wn` block of it as 16 x 16 accumulator fragments. The k dimension is
walked in steps of `bk`: each step's tiles of A (`bm x bk`) and B (`bk x bn`) are copied to shared
memory with asynchronous 16-byte copies, `stages` steps ahead (a ring of `stages` buffers), so the
copies of later steps overlap the products of this one. Rows of the shared tiles are padded by 16
bytes, which spreads a fragment load over the memory banks. Edges are zero-filled by the copies and
masked on store, so any m, n, k works as long as k and n are multiples of 16 bytes' worth of elements
(8 for 16-bit inputs, 4 for f32): the host function says so otherwise.

Only the CUDA target renders matrix fragments; `matmul_tc` takes the CUDA runtime's arrays.

Example:
    >>> rt = cuda_runtime()
    >>> a = rt.to_device(np.ones((256, 64), ml_dtypes.bfloat16)); b = rt.to_device(np.ones((64, 128), ml_dtypes.bfloat16))
    >>> matmul_tc(rt, a, b).numpy()[0, :3]
    array([64., 64., 64.], dtype=bfloat16)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import cube
from ..dtype import bf16, f16, f32
from ..errors import DTypeError, ShapeError
from ..cube.frontend import matrix as mx
from ..cube.runtime.autotune import Autotuner, anchor, device_cache
from ..cube.runtime.cublas import product_output
from .common import cube_dtype

PLANE = 32  # units per plane: matrix fragments are a warp's on the CUDA target


@dataclass(frozen=True)
class Tile:
    """A cube's tile (bm x bn, bk deep), each plane's block (wm x wn), the copy pipeline's depth, and
    how many tile rows `group` run side by side (L2 reuse of B's panels)."""

    bm: int = 128
    bn: int = 128
    bk: int = 64
    wm: int = 64
    wn: int = 64
    stages: int = 3
    group: int = 8

    @property
    def units(self) -> int:
        return (self.bm // self.wm) * (self.bn // self.wn) * PLANE

    def shared_bytes(self, itemsize: int) -> int:
        """Shared memory per cube of `matmul_tc_kernel` for elements of `itemsize` bytes (its stages of
        padded A and B tiles, and the f32 scratch): f32 (tf32) needs twice bf16's.

        Example:
            >>> Tile(256, 128, 64, 64, 64, 3).shared_bytes(4) > 227 << 10   # beyond an H200's opt-in limit
            True
        """
        chunk = 16 // itemsize
        tiles = self.stages * (self.bm * (self.bk + chunk) + self.bk * (self.bn + chunk)) * itemsize
        return tiles + (self.units // PLANE) * 256 * 4


# Candidates for autotuning; the first is the default (4 planes on a 128 x 128 tile, 64 deep, 3 stages:
# the best of them on the GPUs timed, see bench/RESULTS.md).
TILES = (Tile(), Tile(128, 128, 32, 64, 64, 3), Tile(128, 256, 32, 64, 64, 3), Tile(256, 128, 64, 64, 64, 3),
         Tile(128, 256, 64, 64, 64, 3), Tile(128, 128, 64, 64, 64, 2), Tile(128, 128, 32, 64, 32, 4),
         Tile(64, 128, 32, 32, 64, 4))


@dataclass(frozen=True)
class GroupTile:
    """A tile of `matmul_group_kernel`: `bm x bn`, 64 deep, one plane group (4 planes) per 64 rows, each
    accumulating its 64 x bn block; `stages` buffers in the copy ring and `group` tile rows side by side."""

    bm: int = 256
    bn: int = 128
    stages: int = 4
    group: int = 8
    bk = 64  # one 128-byte swizzled row of 16-bit elements

    @property
    def units(self) -> int:
        return self.bm // 64 * 128

    def shared_bytes(self, itemsize: int) -> int:
        """Shared memory per cube: `stages` tiles of A (bm x 64) and B (64 x bn), each a whole number
        of the 1024-byte blocks their alignment asks for.

        Example:
            >>> GroupTile(128, 256, 4).shared_bytes(2)   # 192 KiB: one cube per H200 SM
            196608
        """
        return self.stages * (self.bm + self.bn) * self.bk * itemsize


# Plane-group tiles (sm_90: wgmma), f16/bf16 only, the fastest at large bf16 products first
# (bench/RESULTS.md); the smaller ones leave more cubes to small products.
GROUP_TILES = (GroupTile(256, 128, 4), GroupTile(128, 256, 4), GroupTile(128, 192, 4), GroupTile(128, 128, 6),
               GroupTile(64, 128, 4))


@cube.function
def tile_origin(m, n, bm, bn, group):
    """(row, column) of this cube's output tile. Cubes run in groups of `group` tile rows, column by
    column within a group, so the cubes resident at once share a few panels of A and of B in L2 (row by
    row, every cube row would re-read all of B)."""
    tiles_m = (m + bm - 1) // bm
    width = group * ((n + bn - 1) // bn)
    first = (cube.CUBE_POS_X // width) * group
    rows_in_group = cube.min(tiles_m - first, group)
    return (first + (cube.CUBE_POS_X % width) % rows_in_group) * bm, ((cube.CUBE_POS_X % width) // rows_in_group) * bn


@cube.function
def copy_tile(dst, dst_base, ld, src, src_base, src_ld, r0, c0, rows_valid, cols_valid, rows, cols, units, chunk):
    """Start copying the `rows x cols` block at (r0, c0) of `src` (row stride `src_ld`, rows_valid x
    cols_valid) to `dst` from `dst_base` (row stride `ld`), `chunk` elements per copy; zeros outside."""
    for i in cube.unroll(range(rows * cols // chunk // units)):
        c = cube.UNIT_POS + i * units
        r = c // (cols // chunk)
        col = (c % (cols // chunk)) * chunk
        ok = (r0 + r < rows_valid) and (c0 + col < cols_valid)
        mx.copy_async(dst, dst_base + r * ld + col, src, src_base + (r0 + r) * src_ld + c0 + col, chunk, ok)


@cube.function
def load_tiles(a, b, sa, sb, stage, kt, m0, n0, a_base, b_base, m, n, k, bm, bn, bk, lda, ldb, units, chunk):
    """Start the copies of step `kt`'s A and B tiles into ring buffer `stage` (zeros outside the matrices)."""
    copy_tile(sa, stage * bm * lda, lda, a, a_base, k, m0, kt * bk, m, k, bm, bk, units, chunk)
    copy_tile(sb, stage * bk * ldb, ldb, b, b_base, n, kt * bk, n0, k, n, bk, bn, units, chunk)


@cube.function
def multiply_stage(sa, sb, fa, fb, acc, stage, wy, wx, bm, bk, wm, wn, lda, ldb, fk):
    """acc += this plane's rows of the A tile @ its columns of the B tile, from ring buffer `stage`."""
    a0 = stage * bm * lda + wy * wm * lda
    b0 = stage * bk * ldb + wx * wn
    for kk in cube.unroll(range(bk // fk)):
        for i in cube.unroll(range(wm // 16)):
            mx.load(fa[i], sa, a0 + i * 16 * lda + kk * fk, lda)
        for j in cube.unroll(range(wn // 16)):
            mx.load(fb[j], sb, b0 + kk * fk * ldb + j * 16, ldb)
        for i in cube.unroll(range(wm // 16)):
            for j in cube.unroll(range(wn // 16)):
                mx.mma(acc[i * (wn // 16) + j], fa[i], fb[j], acc[i * (wn // 16) + j])


@cube.kernel
def matmul_tc_kernel(a: cube.Array, b: cube.Array, out: cube.Array, m: cube.i32, n: cube.i32, k: cube.i32,
                     a_batch: cube.i32, b_batch: cube.i32, T: cube.Comptime, bm: cube.Comptime[int],
                     bn: cube.Comptime[int], bk: cube.Comptime[int], wm: cube.Comptime[int],
                     wn: cube.Comptime[int], stages: cube.Comptime[int], group: cube.Comptime[int]):
    units = (bm // wm) * (bn // wn) * 32
    chunk = 16 // T.itemsize            # elements per 16-byte copy
    fk = 8 if T.itemsize == 4 else 16   # tf32 fragments are 16 x 16 x 8
    lda = bk + chunk                    # shared rows padded by 16 bytes
    ldb = bn + chunk
    warp = cube.UNIT_POS // 32
    wy = warp // (bn // wn)
    wx = warp % (bn // wn)
    z = cube.CUBE_POS_Z
    m0, n0 = tile_origin(m, n, bm, bn, group)
    a_base = z * a_batch
    b_base = z * b_batch
    sa = cube.shared(T, stages * bm * lda)
    sb = cube.shared(T, stages * bk * ldb)
    scratch = cube.shared(cube.f32, (units // 32) * 256)
    fa = tuple(mx.fragment("a", T, 16, 16, fk) for _ in range(wm // 16))
    fb = tuple(mx.fragment("b", T, 16, 16, fk) for _ in range(wn // 16))
    acc = tuple(mx.fragment("accumulator", cube.f32, 16, 16, fk) for _ in range((wm // 16) * (wn // 16)))
    for f in cube.unroll(range(len(acc))):
        mx.fill(acc[f], 0.0)
    ktiles = (k + bk - 1) // bk
    for s in cube.unroll(range(stages - 1)):
        load_tiles(a, b, sa, sb, s, s, m0, n0, a_base, b_base, m, n, k, bm, bn, bk, lda, ldb, units, chunk)
        mx.copy_commit()
    for kt in range(ktiles):
        mx.copy_wait(stages - 2)  # step kt has landed (this unit's copies) ...
        cube.sync_units()         # ... and everyone's; everyone is also done with step kt - 1's buffer
        nxt = kt + stages - 1
        load_tiles(a, b, sa, sb, nxt % stages, nxt, m0, n0, a_base, b_base, m, n, k, bm, bn, bk, lda, ldb,
                   units, chunk)
        mx.copy_commit()
        multiply_stage(sa, sb, fa, fb, acc, kt % stages, wy, wx, bm, bk, wm, wn, lda, ldb, fk)
    mx.copy_wait(0)
    # Each plane writes its accumulators through a 16 x 16 scratch of its own, masking the edges and
    # rounding to the output dtype.
    lane = cube.UNIT_POS % 32
    o_base = z * m * n
    for i in cube.unroll(range(wm // 16)):
        for j in cube.unroll(range(wn // 16)):
            mx.store(scratch, warp * 256, 16, acc[i * (wn // 16) + j])
            cube.sync_units()
            for e in cube.unroll(range(8)):
                row = m0 + wy * wm + i * 16 + (lane * 8 + e) // 16
                col = n0 + wx * wn + j * 16 + (lane * 8 + e) % 16
                if row < m and col < n:
                    out[o_base + row * n + col] = out.dtype(scratch[warp * 256 + lane * 8 + e])
            cube.sync_units()


@cube.function
def swizzled(row, col):
    """Where element (row, col) of a tile with rows of 64 16-bit elements (128 bytes) lies in the
    swizzled layout `group_mma` reads: 16-byte chunk j of row r at chunk j ^ (r % 8)."""
    return row * 64 + (((col // 8) ^ (row % 8)) * 8) + col % 8


@cube.function
def load_group_tiles(a, b, sa, sb, stage, kt, m0, n0, a_base, b_base, m, n, k, bm, bn, units):
    """Start the copies of step `kt`'s A tile (bm x 64, rows swizzled) and B tile (64 x bn, in panels
    of 64 columns, each 64 x 64 swizzled) into ring buffer `stage`; zeros outside the matrices."""
    for i in cube.unroll(range(bm * 8 // units)):
        c = cube.UNIT_POS + i * units
        r = c // 8
        col = (c % 8) * 8
        ok = (m0 + r < m) and (kt * 64 + col < k)
        mx.copy_async(sa, stage * bm * 64 + swizzled(r, col), a, a_base + (m0 + r) * k + kt * 64 + col, 8, ok)
    for i in cube.unroll(range(bn * 8 // units)):
        c = cube.UNIT_POS + i * units
        r = c // (bn // 8)
        col = (c % (bn // 8)) * 8
        ok = (kt * 64 + r < k) and (n0 + col < n)
        mx.copy_async(sb, stage * bn * 64 + (col // 64) * 4096 + swizzled(r, col % 64), b,
                      b_base + (kt * 64 + r) * n + n0 + col, 8, ok)


@cube.kernel
def matmul_group_kernel(a: cube.Array, b: cube.Array, out: cube.Array, m: cube.i32, n: cube.i32, k: cube.i32,
                        a_batch: cube.i32, b_batch: cube.i32, T: cube.Comptime, bm: cube.Comptime[int],
                        bn: cube.Comptime[int], stages: cube.Comptime[int], group: cube.Comptime[int]):
    """`matmul_tc_kernel`'s product with plane-group products: each group of 4 planes owns 64 rows of
    the tile and multiplies straight from shared memory, asynchronously, one batch (4 products of 16
    deep) per 64-deep step with the next one's copies in flight. The ring keeps `stages - 2` steps of
    copies ahead: a buffer is refilled only once the batch that read it (two steps back) is done."""
    units = bm // 64 * 128
    z = cube.CUBE_POS_Z
    m0, n0 = tile_origin(m, n, bm, bn, group)
    a_base = z * a_batch
    b_base = z * b_batch
    sa = cube.shared(T, stages * bm * 64)
    sb = cube.shared(T, stages * bn * 64)
    wg = cube.UNIT_POS // 128
    acc = mx.group_fragment(bn)
    mx.fill(acc, 0.0)
    ktiles = (k + 63) // 64
    for s in cube.unroll(range(stages - 2)):
        load_group_tiles(a, b, sa, sb, s, s, m0, n0, a_base, b_base, m, n, k, bm, bn, units)
        mx.copy_commit()
    for kt in range(ktiles):
        mx.copy_wait(stages - 3)  # step kt has landed (this unit's copies) ...
        cube.sync_units()         # ... and everyone's; every group's batch kt - 2 is done
        nxt = kt + stages - 2
        load_group_tiles(a, b, sa, sb, nxt % stages, nxt, m0, n0, a_base, b_base, m, n, k, bm, bn, units)
        mx.copy_commit()
        a0 = (kt % stages) * bm * 64 + wg * 64 * 64
        b0 = (kt % stages) * bn * 64
        mx.group_mma(acc, sa, tuple(a0 + kk * 16 for kk in range(4)), sb, tuple(b0 + kk * 16 * 64 for kk in range(4)),
                     4096)
        mx.group_wait(acc, 1)     # batch kt - 1 is done: its buffer may be refilled next step
    mx.group_wait(acc, 0)
    mx.copy_wait(0)
    row0 = m0 + wg * 64
    mx.group_store(out, z * m * n + row0 * n + n0, n, acc, m - row0, n - n0)


def supports(a_shape: tuple, b_shape: tuple, dtype, tf32: bool) -> str:
    """"" when `matmul_tc` can multiply these operands, else why not (for the caller's fallback)."""
    t = cube_dtype(dtype)
    if t not in (f16, bf16, f32) or (t is f32 and not tf32):
        return f"tensor-core matmul takes f16, bf16, or f32 with tf32 allowed, got {t.name}"
    if len(a_shape) not in (2, 3) or len(b_shape) not in (2, 3):
        return f"tensor-core matmul takes 2-D or 3-D operands, got {a_shape} and {b_shape}"
    chunk = 16 // t.itemsize
    k, n = a_shape[-1], b_shape[-1]
    if k != b_shape[-2]:
        return f"inner dims differ: {a_shape} @ {b_shape}"
    if k % chunk or n % chunk:
        return f"k and n must be multiples of {chunk} for {t.name} (16-byte copies), got k={k}, n={n}"
    if len(a_shape) == 3 and len(b_shape) == 3 and a_shape[0] != b_shape[0] and 1 not in (a_shape[0], b_shape[0]):
        return f"batch dims do not broadcast: {a_shape} @ {b_shape}"
    return ""


def matmul_tc(runtime, a, b, tile: Tile | GroupTile = TILES[0], tf32: bool = True):
    """`a @ b` on the matrix units of `runtime`'s device, for C-contiguous device arrays (2-D, or 3-D
    with a batch dim that may broadcast). f16/bf16 accumulate in f32; f32 runs as tf32 (`tf32` must be
    true: ember's `[cuda] allow_tf32` setting). Returns a new device array of the inputs' dtype.
    A `GroupTile` runs `matmul_group_kernel` (f16/bf16, sm_90 devices).

    Example:
        >>> c = matmul_tc(rt, rt.to_device(a), rt.to_device(b))
    """
    if a.dtype != b.dtype:
        raise DTypeError(f"matmul: operands must share a dtype, got {a.dtype} and {b.dtype}")
    why = supports(a.shape, b.shape, a.dtype, tf32)
    if why:
        raise DTypeError(f"matmul: {why}") if "takes f16" in why else ShapeError("matmul", why)
    if isinstance(tile, GroupTile) and cube_dtype(a.dtype) is f32:
        raise DTypeError("matmul: plane-group tiles take f16 or bf16 (wgmma transposes no tf32 operand), got float32")
    out, (m, n, k, batch, a_batch, b_batch) = product_output(runtime, a, b)
    if out.size == 0:
        return out  # (k == 0 stores the zero-filled accumulators)
    count = cube.CubeCount(-(-n // tile.bn) * -(-m // tile.bm), 1, batch)
    T = cube_dtype(a.dtype)
    if isinstance(tile, GroupTile):
        kernel, shape = matmul_group_kernel, dict(bm=tile.bm, bn=tile.bn, stages=tile.stages, group=tile.group)
    else:
        kernel, shape = matmul_tc_kernel, dict(bm=tile.bm, bn=tile.bn, bk=tile.bk, wm=tile.wm, wn=tile.wn,
                                               stages=tile.stages, group=tile.group)
    runtime.launch(kernel, count, cube.CubeDim(tile.units), (a, b, out, m, n, k, a_batch, b_batch), dict(T=T, **shape))
    return out


def cuda_matmul_autotuner(runtime, level: str | None = None, tf32: bool = True, itemsize: int = 2) -> Autotuner:
    """An autotuner over the tile variants of `matmul_tc` that fit the device's shared memory for
    elements of `itemsize` bytes (with the plane-group tiles for 16-bit elements where `group_tiles_run`),
    and cuBLAS (through CuPy, when it imports), for operands `matmul_tc` supports; winners persist per GPU
    model. `tuner(a, b)` multiplies.

    Example:
        >>> tuner = cuda_matmul_autotuner(rt)
        >>> c = tuner(a, b)          # times the candidates on the first call of this shape class
    """
    from ..cube.runtime.cublas import cublas_available, cublas_matmul
    # cuBLAS first: the default where timing does not pay (small problems, `[autotune] level` minimal).
    candidates = {"cublas": lambda a, b: cublas_matmul(runtime, a, b, tf32)} if cublas_available()[0] else {}
    candidates.update({f"tc_{t.bm}x{t.bn}x{t.bk}_w{t.wm}x{t.wn}_s{t.stages}":
                       (lambda a, b, t=t: matmul_tc(runtime, _rows(a), _rows(b), t, tf32)) for t in TILES
                       if t.shared_bytes(itemsize) <= runtime.limits.max_shared})
    if itemsize == 2 and group_tiles_run(runtime):
        candidates.update({f"group_{t.bm}x{t.bn}_s{t.stages}":
                           (lambda a, b, t=t: matmul_tc(runtime, _rows(a), _rows(b), t)) for t in GROUP_TILES
                           if t.shared_bytes(itemsize) <= runtime.limits.max_shared})

    def key(a, b) -> tuple:
        # The layouts too: the tiles copy an operand that is not in rows (a transposed view), cuBLAS reads it.
        batch = max(x.shape[0] if len(x.shape) == 3 else 1 for x in (a, b))
        return (anchor(a.shape[-2]), anchor(b.shape[-1]), anchor(a.shape[-1]), anchor(batch), str(a.dtype), tf32,
                *("rows" if x.flags.c_contiguous else "strided" for x in (a, b)))

    cache = device_cache(f"cuda-{runtime.name}".replace(" ", "_"))
    return Autotuner("matmul", candidates, key, cache=cache, level=level, timer=gpu_timer(runtime),
                     worth=lambda a, b: a.shape[-2] * b.shape[-1] * a.shape[-1] >= 1 << 24, aside=runtime.unrecorded)


def group_tiles_run(runtime) -> bool:
    """Whether `runtime` runs the plane-group tiles: an sm_90 device, and an NVRTC that compiles for
    sm_90a (12.0 and later; CUDA 11.8's knows sm_90 without wgmma).

    Example:
        >>> group_tiles_run(rt)     # an H200 with the cuda extra's NVRTC
        True
    """
    from ..cube.runtime.nvrtc import nvrtc_version
    return runtime.arch == 90 and tuple(int(p) for p in nvrtc_version().split(".")) >= (12, 0)


GPU_TIMED_CALLS = 5


def gpu_timer(runtime):
    """An autotune timer of the device's time per call, with no host time in it: the candidate's call is
    captured once as a CUDA graph, and CUDA events time `GPU_TIMED_CALLS` replays of it queued back to
    back (`runtime.time`). Events around the calls themselves would time the host's Python between them
    too whenever a call's device time is shorter than its host time, which a replayed plan does not pay,
    and so pick slower kernels (docs/cuda.md, "The device"). A candidate
    that cannot be captured (one that waits on the host) is timed as calls queued back to back.

    Example:
        >>> timer = gpu_timer(rt)
        >>> timer("cublas", lambda: cublas_matmul(rt, a, b))     # seconds of device time per call
        3.1e-05
    """
    from ..cube.runtime.cuda import CudaError

    def timer(name: str, run) -> float:
        try:
            graph = runtime.capture(run, warmup=False)
        except CudaError:
            return runtime.time(run, repeat=GPU_TIMED_CALLS, warmup=0) / 1e3
        try:
            return runtime.time(graph.replay, repeat=GPU_TIMED_CALLS, warmup=1) / 1e3
        finally:
            graph.close()
    return timer


_tuners: dict = {}


def _rows(x):
    """`x` in C order (the tiles read rows): itself, or a copy."""
    return x if x.flags.c_contiguous else x.copy()


def cuda_matmul(a, b):
    """`a @ b` for CUDA arrays by the fastest of the tensor-core tiles and cuBLAS, or None when neither
    applies (then the caller runs the generic cube kernel).

    2-D and 3-D operands of one dtype: f16/bf16, and f32 when `[cuda] allow_tf32` is on, go through
    `cuda_matmul_autotuner`; f32 without TF32 and f64 go to cuBLAS when CuPy is here. Strided operands
    are read in place by cuBLAS when they are transposed views, and copied to rows for the tiles.

    Example:
        >>> c = cuda_matmul(rt.to_device(a), rt.to_device(b))   # a CudaArray, or None
    """
    from ..settings import settings
    from ..cube.runtime.cublas import cublas_available, cublas_matmul
    from ..cube.runtime.cuda import CudaArray
    if not (isinstance(a, CudaArray) and isinstance(b, CudaArray)) or a.dtype != b.dtype:
        return None
    if len(a.shape) not in (2, 3) or len(b.shape) not in (2, 3) or a.shape[-1] != b.shape[-2]:
        return None
    tf32 = settings().get("cuda", "allow_tf32")
    if supports(a.shape, b.shape, a.dtype, tf32) == "":
        key = (id(a.runtime), tf32, a.itemsize)
        if key not in _tuners:
            _tuners[key] = cuda_matmul_autotuner(a.runtime, tf32=tf32, itemsize=a.itemsize)
        return _tuners[key](a, b)
    batch_ok = len(a.shape) == 2 or len(b.shape) == 2 or a.shape[0] == b.shape[0] or 1 in (a.shape[0], b.shape[0])
    if a.dtype.name in ("float32", "float64", "float16", "bfloat16") and batch_ok and cublas_available()[0]:
        return cublas_matmul(a.runtime, a, b, tf32)
    return None
