"""cuBLAS as a vendor candidate for matmul on the CUDA runtime, through CuPy's cuBLAS bindings.

`cublas_matmul(runtime, a, b)` multiplies device arrays (2-D, or 3-D with a batch that may broadcast)
with `cublasGemmStridedBatchedEx` on the runtime's stream, on the same device memory: CuPy only lends
its cuBLAS handle and loads libcublas. The two calls (`cublasSetStream_v2`, the GEMM) go to libcublas
through ctypes, not through CuPy's wrappers, which refuse any call while the stream captures a CUDA
graph: so a fusion plan holding a matmul can be replayed as a graph (`backend/cube/fused/cuda_graphs.py`). Operands
whose last two dims are rows (C order, or rows of a wider matrix: a slice) or columns (a transposed
view, as the matmul's gradients `g @ w.T` and `x.T @ g` pass them) are read in place (the leading
dimension, the batch stride, cuBLAS's transpose flag); other layouts are copied first. f16/bf16 accumulate in f32; f32
uses TF32 tensor cores when `tf32` is true (as `[cuda] allow_tf32` says), else full f32. A large product
whose n columns are not a multiple of 16 bytes (a vocabulary of 50257) is computed on b widened with
zero columns, and returns a view of the output's first n columns (`WIDEN_MIN`).

Why CuPy and not cuBLASLt through nvmath-python: CuPy is on the GPU machines we run on and its
bindings take raw pointers, so no dtype support of its own is needed (bf16 included); nvmath-python
(cuBLASLt with fused bias/ReLU/GELU epilogues) would be the better candidate where it is installed.

Example:
    >>> ok, why = cublas_available()
    >>> c = cublas_matmul(rt, rt.to_device(a), rt.to_device(b))
"""

from __future__ import annotations


import numpy as np

from ...errors import DTypeError, ShapeError

# cudaDataType and cublasComputeType_t values (cublas_api.h, library_types.h).
_DATA = {"float16": 2, "bfloat16": 14, "float32": 0, "float64": 1}
_COMPUTE_32F, _COMPUTE_32F_TF32, _COMPUTE_64F = 68, 77, 70
_OP_N, _OP_T = 0, 1
_GEMM_DEFAULT = -1


def cublas_available() -> tuple[bool, str]:
    """(True, "") when CuPy's cuBLAS bindings import here, else (False, why)."""
    try:
        _bindings()
    except ImportError as e:
        return False, f"cuBLAS through CuPy needs cupy (pip install cupy-cuda13x): {e}"
    return True, ""


def _bindings():
    from cupy.cuda import device
    from cupy_backends.cuda.libs import cublas  # loads libcublas into the process
    return cublas, device, _library()


_lib: list = []  # [the ctypes library of the libcublas CuPy loaded, or None where it is not found]


def _library():
    """libcublas (the copy CuPy's bindings loaded, found in /proc/self/maps) with the argument types of
    the two calls made here, or None where it is not found (then CuPy's wrappers are used)."""
    if not _lib:
        _lib.append(_load())
    return _lib[0]


def _load():
    import ctypes
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "/libcublas.so" in line}
    except OSError:
        return None
    if not paths:
        return None
    lib = ctypes.CDLL(sorted(paths)[0])
    p, i, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
    lib.cublasSetStream_v2.argtypes = [p, p]
    lib.cublasGemmStridedBatchedEx.argtypes = [p, i, i, i, i, i, p, p, i, i, ll, p, i, i, ll, p, p, i, i, ll, i, i, i]
    return lib


WIDEN_MIN = 1 << 32
"""m * n * k (times the batch) from which a product whose n columns are not a multiple of 16 bytes is
computed on b widened to such a multiple (its columns, then zeros) and returned as a view of the wider
output's first n columns: cuBLAS then runs its aligned kernels, which more than pay for the widening
on large products (docs/cuda.md, "The device"); a wider ldc alone does not change cuBLAS's choice. Below
it the saving is smaller than the copy of b and what a view may cost later ops (one that needs
C-contiguous rows)."""


def product_output(runtime, a, b) -> tuple:
    """The output of a batched `a @ b` of C-contiguous 2-D/3-D operands (uninitialized, on `runtime`) and
    (m, n, k, batch, a's batch stride, b's batch stride), a stride being 0 where the operand broadcasts.

    Example:
        >>> out, (m, n, k, batch, sa, sb) = product_output(rt, a, b)
    """
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batches = [x.shape[0] for x in (a, b) if len(x.shape) == 3]
    batch = 0 if 0 in batches else max(batches, default=1)  # a batch of none: an empty product
    out = runtime.empty((batch, m, n) if 3 in (len(a.shape), len(b.shape)) else (m, n), a.dtype)
    sa = m * k if len(a.shape) == 3 and a.shape[0] == batch else 0
    sb = k * n if len(b.shape) == 3 and b.shape[0] == batch else 0
    return out, (m, n, k, batch, sa, sb)


def operand_layout(x, rows: int, cols: int) -> tuple | None:
    """(cuBLAS op, leading dimension, batch stride) that reads the last two dims of `x` (`rows` x `cols`)
    in place, in elements: (N, row step) for rows of unit-stride elements (a C-order matrix, or a slice of
    a wider one: the q, k, v thirds of a packed projection), (T, column step) for a transposed view; the
    batch stride is the first dim's step of a 3-D `x` (0 when it broadcasts). None for other strides
    (negative, not whole elements, or neither dim unit-stride): the caller copies.

    Example:
        >>> operand_layout(w.T, 768, 3072)        # w a C-contiguous (3072, 768) device array
        (1, 768, 0)
    """
    s = x.itemsize
    if any(step < 0 or step % s for step in x.strides):
        return None
    batch = x.strides[0] // s if len(x.shape) == 3 and x.shape[0] > 1 else 0
    row_step, col_step = (step // s for step in x.strides[-2:])
    if (col_step == 1 or cols == 1) and (rows == 1 or row_step >= max(cols, 1)):
        return _OP_N, max(cols, 1) if rows == 1 else row_step, batch
    if (row_step == 1 or rows == 1) and (cols == 1 or col_step >= max(rows, 1)):
        return _OP_T, max(rows, 1) if cols == 1 else col_step, batch
    return None


_streams: dict = {}  # id(runtime) -> CuPy's ExternalStream of its stream (made once)
_SCALARS = {np.float32: (np.ones(1, np.float32), np.zeros(1, np.float32)),
            np.float64: (np.ones(1, np.float64), np.zeros(1, np.float64))}  # alpha, beta (read at the call)


def cublas_matmul(runtime, a, b, tf32: bool = True):
    """`a @ b` by cuBLAS on `runtime`'s stream; a new device array of the inputs' dtype (see module)."""
    if a.dtype != b.dtype:
        raise DTypeError(f"matmul: operands must share a dtype, got {a.dtype} and {b.dtype}")
    if a.dtype.name not in _DATA:
        raise DTypeError(f"cuBLAS matmul takes f16, bf16, f32 or f64, got {a.dtype}")
    if len(a.shape) not in (2, 3) or len(b.shape) not in (2, 3) or a.shape[-1] != b.shape[-2]:
        raise ShapeError("matmul", f"cuBLAS matmul takes 2-D or 3-D operands with matching inner dims, "
                                   f"got {a.shape} @ {b.shape}")
    cublas, device, lib = _bindings()
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    a_layout, b_layout = operand_layout(a, m, k), operand_layout(b, k, n)
    if a_layout is None:
        a = a.copy()
        a_layout = operand_layout(a, m, k)
    if b_layout is None:
        b = b.copy()
        b_layout = operand_layout(b, k, n)
    align, columns = 16 // a.itemsize, n
    if n % align and m * n * k * max([x.shape[0] for x in (a, b) if len(x.shape) == 3], default=1) >= WIDEN_MIN:
        b = _widened(runtime, b, n + (-n) % align)
        b_layout = operand_layout(b, k, b.shape[-1])
    out, (m, n, k, batch, _, _) = product_output(runtime, a, b)
    sa = a_layout[2] if len(a.shape) == 3 and a.shape[0] == batch else 0  # 0: one matrix for the batch
    sb = b_layout[2] if len(b.shape) == 3 and b.shape[0] == batch else 0
    if batch > 1 and sb == 0 and a_layout[0] == _OP_N and sa == m * a_layout[1]:
        # One b for a batch of a's row blocks that follow each other: one taller product (the output's
        # blocks follow each other too), which cuBLAS tiles better than `batch` short ones.
        m, batch, sa = batch * m, 1, 0
    if out.size == 0:
        return out
    if k == 0:
        runtime.write_zeros(out)
        return out
    runtime.activate()
    handle = device.get_cublas_handle()
    data = _DATA[a.dtype.name]
    compute = _COMPUTE_64F if data == 1 else _COMPUTE_32F_TF32 if (data == 0 and tf32) else _COMPUTE_32F
    one, zero = _SCALARS[np.float64 if data == 1 else np.float32]
    # Row-major C = A @ B is column-major C^T = B^T @ A^T: swap the operands; a transposed view is a
    # column-major matrix, read with the transpose flag.
    args = (handle, b_layout[0], a_layout[0], n, m, k, one.ctypes.data, b.ptr, data, b_layout[1], sb, a.ptr, data,
            a_layout[1], sa, zero.ctypes.data, out.ptr, data, n, m * n, batch, compute, _GEMM_DEFAULT)
    if lib is not None:
        gemm = Gemm(runtime, lib, args, f"{m}x{k} @ {k}x{n}, batch {batch}, {a.dtype}")
        gemm.call(args)
        runtime.recorded(gemm, None, (a, b, out))
    else:
        from cupy.cuda import stream
        own_stream = _streams.get(id(runtime))
        if own_stream is None:
            own_stream = _streams[id(runtime)] = stream.ExternalStream(int(runtime.stream))
        with own_stream:  # CuPy sets the handle's stream from the current one (and refuses while capturing)
            cublas.gemmStridedBatchedEx(*args)
    return out if columns == n else out.strided(out.shape[:-1] + (columns,), out.strides)


def _widened(runtime, b, width: int):
    """`b` (..., k, n) as a (..., k, `width`) array: its columns, then zeros. A transposed view (a linear
    layer's weight, (n, k) in rows) widens its rows instead: one dense copy.

    Example:
        >>> _widened(rt, w.T, 50260).shape      # w a C-contiguous (50257, 768) device array
        (768, 50260)
    """
    transposed = len(b.shape) == 2 and b.strides[0] == b.itemsize  # columns of unit stride: rows of b.T
    source = b.T if transposed else b
    wide = runtime.empty((width, b.shape[0]) if transposed else b.shape[:-1] + (width,), b.dtype)
    runtime.write_zeros(wide)
    wide.strided(source.shape, wide.strides)[...] = source  # the library's assign kernel
    return wide.T if transposed else wide


class Gemm:
    """One cuBLAS GEMM call as the runtime records it (`CudaRuntime.record_launches`: a `Launch` whose
    args are the operands a, b and the output), so that a fusion plan can replay it on new arrays of the
    same layouts (`bind`) as it replays a kernel launch: the call's arguments are made once.

    Example:
        >>> with rt.record_launches() as launches:
        ...     c = cublas_matmul(rt, a, b)
        >>> bound = launches[0].compiled.bind(launches[0], open_slots=(0, 1, 2))
        >>> bound.replay((a2, b2, c2))
    """

    __slots__ = ("runtime", "lib", "args", "what")
    written = (False, False, True)  # which args the call writes (a, b, the output), as a kernel's `written`
    POINTERS = (11, 7, 16)
    """Where a, b and the output's addresses sit in the call's arguments (the operands are swapped)."""

    def __init__(self, runtime, lib, args: tuple, what: str) -> None:
        self.runtime, self.lib, self.args, self.what = runtime, lib, args, what

    def call(self, args) -> None:
        status = self.lib.cublasSetStream_v2(args[0], int(self.runtime.stream)) or \
            self.lib.cublasGemmStridedBatchedEx(*args)
        if status:
            raise RuntimeError(f"cuBLAS GEMM ({self.what}) failed: status {status}")

    def bind(self, launch, open_slots) -> "BoundGemm":
        """This call with the arrays at `open_slots` (0: a, 1: b, 2: the output) given at each replay."""
        return BoundGemm(self, [self.POINTERS[i] for i in open_slots],
                         [a for i, a in enumerate(launch.args) if i not in open_slots])


class BoundGemm:
    """A recorded GEMM whose open operands take new arrays' addresses at each `replay` (see `Gemm`)."""

    __slots__ = ("gemm", "slots", "keep")

    def __init__(self, gemm: Gemm, slots: list, keep: list) -> None:
        self.gemm, self.slots, self.keep = gemm, slots, keep  # keep: the constant operands, alive

    def replay(self, arrays) -> None:
        args = list(self.gemm.args)
        for slot, a in zip(self.slots, arrays):
            args[slot] = a._address + a.offset
        self.gemm.runtime.activate()
        self.gemm.call(args)


__all__ = ["cublas_available", "cublas_matmul", "operand_layout", "product_output"]
