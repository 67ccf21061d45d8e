"""The CPU's GEMM: NumPy's own OpenBLAS, driven from the kernels' OpenMP thread pool.

Why: OpenBLAS (as NumPy ships it) has its own pthread pool whose workers spin after every GEMM; the
cube kernels run on libgomp's pool right after, so on a machine with few cores the two pools take
turns on the same cores (figures: docs/cube.md, "The CPU runtime's threads").

So ember never lets OpenBLAS start its own threads for its GEMMs: `HostBlas.matmul` sets OpenBLAS to
one thread for the length of the call (restoring the user's setting after; the setter is cheap and
wakes nobody) and splits the GEMM itself, in a small C shim built like a kernel, over the
OpenMP threads: by batch when there are enough matrices, else by rows (or columns when the
output is wide), each piece one single-threaded BLAS call. One pool serves kernels and GEMMs alike.

Which BLAS: the OpenBLAS library that NumPy loaded (found in this process's memory map), by the
symbol names of the SciPy build (`scipy_cblas_sgemm64_`, 64-bit ints), of a plain ILP64 build
(`cblas_sgemm64_`) or of an LP64 build (`cblas_sgemm`). With any other BLAS (MKL, Accelerate) or on a
system without /proc, `host_blas()` is None and matmul keeps calling `np.matmul`.

Example:
    >>> blas = host_blas()
    >>> blas.matmul(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32))[0, 0] if blas else 3.0
    3.0
"""

from __future__ import annotations

import ctypes
import math
from pathlib import Path

import numpy as np

from ..compile_cache import cache_key
from ..strides import merge_dims
from .cpu import FLAGS, cpu_runtime, data_pointer
from .host import empty

ENTRY = "ember_gemm"
SERIAL_FLOPS = 1 << 21  # below this a GEMM runs on the calling thread (a parallel region costs more)
MIN_PIECE = 16  # rows or columns per piece: narrower pieces waste BLAS's packing
# OpenBLAS runs a GEMM with m*n*k below 65536 * GEMM_MULTITHREAD_THRESHOLD (4) on the calling thread and
# wakes no worker (checked: 64^3 leaves the workers idle, 100^3 wakes one); `np.matmul` is cheaper there.
OPENBLAS_SERIAL_MNK = 1 << 18

# Symbol sets tried in order: (gemm prefix, gemm suffix, get threads, set threads, 64-bit ints).
_FLAVOURS = (("scipy_cblas_", "gemm64_", "scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_", 1),
             ("cblas_", "gemm64_", "openblas_get_num_threads64_", "openblas_set_num_threads64_", 1),
             ("cblas_", "gemm", "openblas_get_num_threads", "openblas_set_num_threads", 0))

# One entry point for both dtypes and both int widths; p = [batch, m, n, k, a_batch_stride, lda, trans_a,
# b_batch_stride, ldb, trans_b, c_batch_stride, ldc, f64, ilp64, sum over the batch, inner, a_inner_stride,
# b_inner_stride] (strides and leading dims in elements). The batch is (batch / inner, inner): matrix i of a
# is at (i / inner) * a_batch_stride + (i % inner) * a_inner_stride, so a (B, H) batch of attention heads
# viewed out of (B, L, H * D) rows is read in place.
SHIM = r"""
#include <stdint.h>
#include <omp.h>
#include <stdlib.h>
typedef void (*s64_t)(int, int, int, int64_t, int64_t, int64_t, float, const float *, int64_t,
                      const float *, int64_t, float, float *, int64_t);
typedef void (*d64_t)(int, int, int, int64_t, int64_t, int64_t, double, const double *, int64_t,
                      const double *, int64_t, double, double *, int64_t);
typedef void (*s32_t)(int, int, int, int, int, int, float, const float *, int,
                      const float *, int, float, float *, int);
typedef void (*d32_t)(int, int, int, int, int, int, double, const double *, int,
                      const double *, int, double, double *, int);
typedef int64_t (*get64_t)(void);
typedef void (*set64_t)(int64_t);
typedef int (*get32_t)(void);
typedef void (*set32_t)(int);

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

/* One piece: rows [r0, r1) and columns [c0, c1) of matrix `i` of the batch, written to c (or added to
   it when `add`). */
static void piece(void *fn, const int64_t *p, const char *a, const char *b, char *c, int64_t i,
                  int64_t r0, int64_t r1, int64_t c0, int64_t c1, int add) {
  const int64_t k = p[3], lda = p[5], ldb = p[8], ldc = p[11];
  const int ta = (int)p[6], tb = (int)p[9], f64 = (int)p[12], ilp64 = (int)p[13];
  const int64_t size = f64 ? 8 : 4;
  const int64_t outer = i / p[15], inner = i % p[15];
  const char *ai = a + (outer * p[4] + inner * p[16] + (ta == NO_TRANS ? r0 * lda : r0)) * size;
  const char *bi = b + (outer * p[7] + inner * p[17] + (tb == NO_TRANS ? c0 : c0 * ldb)) * size;
  char *ci = c + (i * p[10] + r0 * ldc + c0) * size;
  const int64_t m = r1 - r0, n = c1 - c0;
  if (f64 && ilp64)
    ((d64_t)fn)(ROW_MAJOR, ta, tb, m, n, k, 1.0, (const double *)ai, lda, (const double *)bi, ldb, (double)add,
                (double *)ci, ldc);
  else if (f64)
    ((d32_t)fn)(ROW_MAJOR, ta, tb, (int)m, (int)n, (int)k, 1.0, (const double *)ai, (int)lda, (const double *)bi,
                (int)ldb, (double)add, (double *)ci, (int)ldc);
  else if (ilp64)
    ((s64_t)fn)(ROW_MAJOR, ta, tb, m, n, k, 1.0f, (const float *)ai, lda, (const float *)bi, ldb, (float)add,
                (float *)ci, ldc);
  else
    ((s32_t)fn)(ROW_MAJOR, ta, tb, (int)m, (int)n, (int)k, 1.0f, (const float *)ai, (int)lda, (const float *)bi,
                (int)ldb, (float)add, (float *)ci, (int)ldc);
}

void ember_gemm(void *fn, void *get, void *set, const int64_t *p, const void *a, const void *b, void *c,
                int64_t serial_flops, int64_t min_piece) {
  const int64_t batch = p[0], m = p[1], n = p[2], k = p[3];
  const int ilp64 = (int)p[13];
  const int64_t old = ilp64 ? ((get64_t)get)() : ((get32_t)get)();
  if (old != 1) { if (ilp64) ((set64_t)set)(1); else ((set32_t)set)(1); }
  const int threads = omp_get_max_threads();
  const double flops = 2.0 * batch * m * n * k;
  if (p[14] && batch > 1) {
    /* The batch's products summed into one (m, n) c: contiguous runs of the batch, each accumulated
       by one task (two per thread, as below) into c or a scratch matrix, then the scratches added. */
    const int64_t size = p[12] ? 8 : 4, cells = m * n;
    int64_t parts = threads == 1 || flops < (double)serial_flops ? 1 : 2 * threads;
    if (parts > batch) parts = batch;
    char *scratch = parts > 1 ? malloc((size_t)((parts - 1) * cells * size)) : NULL;
    if (parts > 1 && !scratch) parts = 1;
    #pragma omp parallel for schedule(dynamic, 1) if(parts > 1)
    for (int64_t q = 0; q < parts; ++q) {
      char *into = q == 0 ? (char *)c : scratch + (q - 1) * cells * size;
      for (int64_t i = batch * q / parts; i < batch * (q + 1) / parts; ++i)
        piece(fn, p, a, b, into, i, 0, m, 0, n, i > batch * q / parts);
    }
    for (int64_t q = 1; q < parts; ++q) {
      if (p[12]) { double *to = (double *)c; const double *from = (const double *)scratch + (q - 1) * cells;
                   for (int64_t e = 0; e < cells; ++e) to[e] += from[e]; }
      else { float *to = (float *)c; const float *from = (const float *)scratch + (q - 1) * cells;
             for (int64_t e = 0; e < cells; ++e) to[e] += from[e]; }
    }
    free(scratch);
  } else if (threads == 1 || flops < (double)serial_flops) {
    for (int64_t i = 0; i < batch; ++i) piece(fn, p, a, b, c, i, 0, m, 0, n, 0);
  } else {
    /* Enough matrices: one per task. Else split each over rows (or columns when wider), two pieces
       per thread so that a thread slowed by another process does not hold the others back. */
    const int by_rows = m >= n;
    const int64_t extent = by_rows ? m : n;
    int64_t split = batch >= 2 * threads ? 1 : (2 * threads + batch - 1) / batch;
    if (split > extent / min_piece) split = extent / min_piece > 1 ? extent / min_piece : 1;
    const int64_t tasks = batch * split;
    #pragma omp parallel for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t i = t / split, s = t % split;
      const int64_t lo = extent * s / split, hi = extent * (s + 1) / split;
      if (by_rows) piece(fn, p, a, b, c, i, lo, hi, 0, n, 0);
      else piece(fn, p, a, b, c, i, 0, m, lo, hi, 0);
    }
  }
  if (old != 1) { if (ilp64) ((set64_t)set)(old); else ((set32_t)set)((int)old); }
}

int64_t ember_gemm_threads(void) { return omp_get_max_threads(); }
"""


class HostBlas:
    """Single-threaded OpenBLAS GEMMs split over OpenMP threads (see the module docs).

    Example:
        >>> host_blas().matmul(a, b)   # a @ b for f32/f64 a, b with NumPy's matmul rules
    """

    def __init__(self, library: str, symbols: tuple, shim, threads) -> None:
        prefix, suffix, get, set_, ilp64 = symbols
        lib = ctypes.CDLL(library)
        address = lambda name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value  # noqa: E731
        self.library = library
        self.name = f"{Path(library).name.split('-')[0]}+openmp"
        self.gemm = {np.dtype(np.float32): address(f"{prefix}s{suffix}"),
                     np.dtype(np.float64): address(f"{prefix}d{suffix}")}
        self.get, self.set, self.ilp64 = address(get), address(set_), ilp64
        self.shim = shim
        self.threads = threads

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """`a @ b` (NumPy's rules) for f32 or f64 operands of one dtype.

        Example:
            >>> host_blas().matmul(np.eye(2), np.arange(4.0).reshape(2, 2))
            array([[0., 1.],
                   [2., 3.]])
        """
        return self._gemm(a, b, summed=False)

    def matmul_sum(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """`(a @ b).sum(0)` for 3-D (or broadcast) batches, without the batch of products: each thread
        accumulates a run of the batch in BLAS (beta = 1) and the runs' sums are added at the end. This
        is how a convolution's per-sample weight gradients are summed.

        Example:
            >>> host_blas().matmul_sum(np.ones((3, 2, 4)), np.ones((3, 4, 5)))[0, 0]
            12.0
        """
        if min(a.ndim, b.ndim) < 2 or max(a.ndim, b.ndim) < 3:
            raise ValueError(f"matmul_sum: needs matrices and a batch, got {a.shape} @ {b.shape}")
        return self._gemm(a, b, summed=True)

    def _gemm(self, a: np.ndarray, b: np.ndarray, summed: bool) -> np.ndarray:
        if a.ndim < 2 or b.ndim < 2:
            return np.matmul(a, b)
        if a.shape[-1] != b.shape[-2]:
            raise ValueError(f"matmul: inner dims differ: {a.shape} @ {b.shape}")
        (m, k), n = a.shape[-2:], b.shape[-1]
        batch_shape = () if a.ndim == b.ndim == 2 else np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        batch = math.prod(batch_shape)
        if (a.dtype != b.dtype or a.dtype not in self.gemm or batch * m * k * n < OPENBLAS_SERIAL_MNK
                or not self.ilp64 and max(a.size, b.size) >= 2**31):
            product = np.matmul(a, b)
            return np.add.reduce(product, tuple(range(product.ndim - 2))) if summed else product
        # from the host pool: `Device.cpu().memory_stats()` counts it
        out = empty((m, n) if summed else batch_shape + (m, n), a.dtype)
        if out.size == 0:
            return out
        if k == 0 or batch == 0:
            out[...] = 0
            return out
        a, ta, lda = _matrices(a, batch_shape)
        b, tb, ldb = _matrices(b, batch_shape)
        steps = _batch_steps(batch_shape, a, b)
        if steps is None:  # batch strides that do not fold into two levels: both copied to C order
            a, ta, lda = _matrices(_broadcast_copy(a, batch_shape), batch_shape)
            b, tb, ldb = _matrices(_broadcast_copy(b, batch_shape), batch_shape)
            steps = _batch_steps(batch_shape, a, b)
        inner, (a_step, a_inner), (b_step, b_inner) = steps
        if batch > 1 and inner == 1 and b_step == 0 and ta == 111 and a_step == m * lda and not summed:
            m, batch, a_step = batch * m, 1, 0  # one b for a's consecutive row blocks: one taller product
        p = (ctypes.c_int64 * 18)(batch, m, n, k, a_step, lda, ta, b_step, ldb, tb, 0 if summed else m * n, n,
                                  int(a.dtype == np.float64), self.ilp64, int(summed), inner, a_inner, b_inner)
        self.shim(self.gemm[a.dtype], self.get, self.set, p, data_pointer(a), data_pointer(b), data_pointer(out),
                  SERIAL_FLOPS, MIN_PIECE)
        return out


def _matrices(x: np.ndarray, batch_shape: tuple) -> tuple[np.ndarray, int, int]:
    """(array, CBLAS transpose flag, leading dim in elements) for one operand's matrices.

    BLAS needs a unit stride in one of the last two dims and a leading dim that does not overlap rows;
    anything else (a broadcast row, a negative or odd stride) is copied to a contiguous array first.
    """
    item = x.itemsize
    if all(s >= 0 and s % item == 0 for s in x.strides):
        rows, cols = x.shape[-2:]
        row_stride, col_stride = x.strides[-2] // item, x.strides[-1] // item
        if (col_stride == 1 or cols == 1) and (rows == 1 or row_stride >= cols):
            return x, 111, row_stride if rows > 1 else cols
        if (row_stride == 1 or rows == 1) and (cols == 1 or col_stride >= rows):
            return x, 112, col_stride if cols > 1 else rows
    return _matrices(_broadcast_copy(x, batch_shape), batch_shape)


def _broadcast_copy(x: np.ndarray, batch_shape: tuple) -> np.ndarray:
    return np.ascontiguousarray(np.broadcast_to(x, batch_shape + x.shape[-2:]))


def _batch_steps(batch_shape: tuple, a: np.ndarray, b: np.ndarray) -> tuple | None:
    """(inner, (a's outer step, a's inner step), (b's ...)) walking the broadcast batch as (batch / inner,
    inner) matrices (steps in elements, 0 where broadcast; the shim's p[15:18]), or None when the batch
    dims do not fold into two levels for both operands."""
    sizes, merged = merge_dims(batch_shape, [_batch_strides(x, batch_shape) for x in (a, b)])
    if len(sizes) > 2:
        return None
    if len(sizes) < 2:
        return 1, *((m[0] if m else 0, 0) for m in merged)
    return sizes[1], *((m[0], m[1]) for m in merged)


def _batch_strides(x: np.ndarray, batch_shape: tuple) -> list[int]:
    """x's element strides over the broadcast batch dims (0 where x is broadcast)."""
    lead = len(batch_shape) - (x.ndim - 2)
    return [0] * lead + [s // x.itemsize if size > 1 else 0 for size, s in zip(x.shape[:-2], x.strides[:-2])]


_host: HostBlas | None = None
_searched = False


def host_blas() -> HostBlas | None:
    """The process's `HostBlas`, or None when NumPy's BLAS is not an OpenBLAS this can drive.

    Example:
        >>> host_blas() is None or host_blas().name.startswith("lib")
        True
    """
    global _host, _searched
    if not _searched:
        _searched = True
        library, symbols = _find_openblas()
        if library is not None:
            _host = HostBlas(library, symbols, *_build_shim())
    return _host


def _find_openblas() -> tuple[str | None, tuple | None]:
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "openblas" in line.rsplit("/", 1)[-1].lower()})
    except OSError:
        return None, None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for flavour in _FLAVOURS:
            prefix, suffix, get, set_, _ = flavour
            names = (f"{prefix}s{suffix}", f"{prefix}d{suffix}", get, set_)
            if all(hasattr(lib, name) for name in names):
                return path, flavour
    return None, None


def _build_shim():
    """(the GEMM entry, `ember_gemm_threads`: the OpenMP threads a GEMM is split over, read at each call
    since `omp_set_num_threads`, torch's `set_num_threads` too, changes them)."""
    rt = cpu_runtime()
    key = cache_key("blas-shim", SHIM, rt.cc_version, " ".join(FLAGS))
    lib = rt.build_library(SHIM, key, ENTRY)
    fn, threads = getattr(lib, ENTRY), lib.ember_gemm_threads
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64),
                   ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
    threads.restype, threads.argtypes = ctypes.c_int64, []
    return fn, threads
