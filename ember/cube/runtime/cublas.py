"""cuBLAS as a vendor candidate for matmul on the CUDA runtime, through CuPy's cuBLAS bindings.

`cublas_matmul(runtime, a, b)` multiplies C-contiguous device arrays (2-D, or 3-D with a batch that
may broadcast) with `cublasGemmEx` / `cublasGemmStridedBatchedEx` on the runtime's stream, on the
same device memory (no copies): CuPy only lends its cuBLAS handle. f16/bf16 accumulate in f32; f32
uses TF32 tensor cores when `tf32` is true (as `[cuda] allow_tf32` says), else full f32.

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
_OP_N = 0
_GEMM_DEFAULT = -1


def cublas_available() -> tuple[bool, str]:
    """(True, "") when CuPy's cuBLAS bindings import here, else (False, why)."""
    try:
        _bindings()
    except ImportError as e:
        return False, f"cuBLAS through CuPy needs cupy (pip install cupy-cuda13x): {e}"
    return True, ""


def _bindings():
    from cupy.cuda import device, stream
    from cupy_backends.cuda.libs import cublas
    return cublas, device, stream


def product_output(runtime, a, b) -> tuple:
    """The output of a batched `a @ b` of C-contiguous 2-D/3-D operands (uninitialized, on `runtime`) and
    (m, n, k, batch, a's batch stride, b's batch stride), a stride being 0 where the operand broadcasts.

    Example:
        >>> out, (m, n, k, batch, sa, sb) = product_output(rt, a, b)
    """
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch = max(x.shape[0] if len(x.shape) == 3 else 1 for x in (a, b))
    out = runtime.empty((batch, m, n) if 3 in (len(a.shape), len(b.shape)) else (m, n), a.dtype)
    sa = m * k if len(a.shape) == 3 and a.shape[0] == batch else 0
    sb = k * n if len(b.shape) == 3 and b.shape[0] == batch else 0
    return out, (m, n, k, batch, sa, sb)


def cublas_matmul(runtime, a, b, tf32: bool = True):
    """`a @ b` by cuBLAS on `runtime`'s stream; a new device array of the inputs' dtype (see module)."""
    if a.dtype != b.dtype:
        raise DTypeError(f"matmul: operands must share a dtype, got {a.dtype} and {b.dtype}")
    if a.dtype.name not in _DATA:
        raise DTypeError(f"cuBLAS matmul takes f16, bf16, f32 or f64, got {a.dtype}")
    if len(a.shape) not in (2, 3) or len(b.shape) not in (2, 3) or a.shape[-1] != b.shape[-2]:
        raise ShapeError("matmul", f"cuBLAS matmul takes 2-D or 3-D operands with matching inner dims, "
                                   f"got {a.shape} @ {b.shape}")
    cublas, device, stream = _bindings()
    out, (m, n, k, batch, sa, sb) = product_output(runtime, a, b)
    if out.size == 0:
        return out
    if k == 0:
        runtime.write_zeros(out)
        return out
    runtime.activate()
    handle = device.get_cublas_handle()
    data = _DATA[a.dtype.name]
    compute = _COMPUTE_64F if data == 1 else _COMPUTE_32F_TF32 if (data == 0 and tf32) else _COMPUTE_32F
    scalar = np.float64 if data == 1 else np.float32
    one, zero = np.ones(1, scalar), np.zeros(1, scalar)
    # Row-major C = A @ B is column-major C^T = B^T @ A^T: swap the operands, no transposes.
    with stream.ExternalStream(int(runtime.stream)):  # CuPy sets the handle's stream from the current one
        cublas.gemmStridedBatchedEx(handle, _OP_N, _OP_N, n, m, k, one.ctypes.data, b.ptr, data, n, sb,
                                    a.ptr, data, k, sa, zero.ctypes.data, out.ptr, data, n, m * n, batch,
                                    compute, _GEMM_DEFAULT)
    return out


__all__ = ["cublas_available", "cublas_matmul", "product_output"]
