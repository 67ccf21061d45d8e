"""The lowering table of the Cube backend: primitive name -> how it runs, one row per primitive.

Each row is a `Lowering(run)`: `run(out, *arrays, **params)` gets the output's `Aval` (already given by
the primitive's shape rule), the input arrays and the primitive's params, and returns an array. A row
that makes its array from no input (`full`, `uniform`, ...) is a `Lowering(run, creates=True)` and is
also given the backend's runtime as `runtime=`; one that may write its result over an input (an
extension whose forward takes `out=`) is `writes_over=True` and is given that input as `over=` when the
fusion decorator donates it.

Most rows run a cube kernel (`ember.kernels`, or `fill.py` beside this file); the view rows
(reshape, permute, expand, slice, flip) touch metadata only, a NumPy view of the input (reshape copies
with the cast kernel when the strides cannot express the new shape); the move rows (cat, pad,
slice_assign) move memory without arithmetic: the NumPy reference on the host, on a device a new array
that the strided assign kernel writes each input into (its slice of it).

A primitive without a row, or whose row raises `Unlowered` for a case its kernel does not cover, runs
its NumPy reference; the backend records it in `CubeBackend.fallbacks`.

Example:
    >>> TABLE["exp"].run(Aval((2,), f32), np.zeros(2, np.float32))
    array([1., 1.], dtype=float32)
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from ... import kernels as lib
from ...kernels import conv_gemm
from ...kernels.common import assign, cube_dtype, empty
from ...kernels.elementwise import Program, run_elementwise
from ...kernels.layout import grouped
from ...kernels.matmul import tuned_matmul
from ...kernels.pool import max_pool2d_grad
from ...kernels import quant_matmul as quant
from ...kernels.sort import MAX_ROW
from ...cube.runtime.arguments import DeviceArray
from ...dtype import bf16, f16, f32, i8, i16, i32, u8
from ...ops import registry
from ...ops.elementwise import TABLE
from ...ops.pool import windows_disjoint
from ...ops.primitive import Aval
from . import fill as own


class Unlowered(Exception):
    """Raised by a row for a case its kernel does not cover: the reference runs instead."""


class Lowering(NamedTuple):
    """One row: how a primitive runs (see the module docstring)."""

    run: Callable[..., np.ndarray]
    creates: bool = False
    """`run` takes `runtime=`, the runtime to make its output on (it has no input to go by)."""
    writes_over: bool = False
    """`run` takes `over=`, an input its output may be written over (fusion's donation)."""


# ---- elementwise ---------------------------------------------------------------------------------

# Narrow dtypes run on the kernels of a wider one: f16/bf16 ops compute in f32 anyway, and i8/i16/u8
# arithmetic done in i32 and stored back wraps exactly as it does in the narrow type. The operands are
# widened and the result narrowed by the cast kernel (one compiled copy per dtype pair, shared by every
# op), so an op compiles for five dtypes instead of ten (a cold kernel cache is what CI pays for).
_WIDE = {f16: f32, bf16: f32, i8: i32, i16: i32, u8: i32}


def _elementwise(name: str) -> Callable:
    """The row of elementwise primitive `name` (a row of the op table, `where` or `cast`): one generated
    kernel of a one-step program, reading each operand through its broadcast layout (no copy to full
    size first), compiled once per (op, dtypes, rank after merging dims, which operands are single
    values; `run_elementwise(alike=True)`). Operands of a narrow dtype are widened first (`_WIDE`).
    Dtypes the op's cube expression does not compute (`Elementwise.computes`) run the reference."""
    row = TABLE.get(name)
    programs: dict = {}  # (input dtypes, params, output dtype) -> (the one-step program, widened)

    def run(out: Aval, *arrays: np.ndarray, **params) -> np.ndarray:
        key = (*[a.dtype for a in arrays], *params.values(), out.dtype)
        found = programs.get(key)
        if found is None:
            dtypes = tuple(cube_dtype(a.dtype) for a in arrays)
            if row is not None and not row.computes(dtypes[-1]):
                raise Unlowered(f"{name} of {dtypes[-1].name}: its kernel does not compute that dtype")
            wide = name != "cast" and any(d in _WIDE for d in dtypes)
            ins = tuple(_WIDE.get(d, d) for d in dtypes) if wide else dtypes
            result = _WIDE.get(out.dtype, out.dtype) if wide else out.dtype
            step = (name, tuple(params.values()), tuple(range(len(arrays))), result)
            found = programs[key] = Program(ins, (step,), (len(arrays),)), wide
        program, wide = found
        if wide:
            arrays = tuple(a if cube_dtype(a.dtype) is d else lib.cast(a, d.np) for a, d in zip(arrays, program.inputs))
        (result,) = run_elementwise(program, out.shape, list(arrays), alike=True)
        return lib.cast(result, out.dtype.np) if wide and result.dtype != out.dtype.np else result
    return run


# ---- reductions, scans, sorts ---------------------------------------------------------------------

def _kept(ndim: int, dims) -> tuple:
    return tuple(d for d in range(ndim) if d not in dims)


def _reduce(op: str) -> Callable:
    def run(out: Aval, x: np.ndarray, *, dims, keepdim) -> np.ndarray:
        # Kept dims first, reduced dims last, each group merged: the kernel reduces the trailing dims.
        v, (kdim, rdim) = grouped(x, [_kept(x.ndim, dims), dims])
        result = lib.reduce(op, v, dims=tuple(range(kdim, kdim + rdim)))
        if result.dtype != x.dtype:  # ints and bools accumulate in i64; the primitive keeps the dtype
            result = lib.cast(result, x.dtype)
        return result.reshape(out.shape)
    return run


def _arg_reduce(op: str) -> Callable:
    def run(out: Aval, x: np.ndarray, *, dim, keepdim) -> np.ndarray:
        if x.ndim == 0:
            return own.fill((), 0, np.dtype(np.int64), x)
        v, (kdim, _) = grouped(x, [_kept(x.ndim, (dim,)), (dim,)])
        return lib.reduce(op, v, dims=kdim).reshape(out.shape)
    return run


def _scan(op: str) -> Callable:
    def run(out: Aval, x: np.ndarray, *, dim) -> np.ndarray:
        if x.ndim == 0:
            return x.copy()
        kept = _kept(x.ndim, (dim,))
        v, (kdim, _) = grouped(x, [kept, (dim,)])
        scanned = lib.scan(op, v, dim=kdim).reshape([x.shape[d] for d in kept] + [x.shape[dim]])
        return np.moveaxis(scanned, -1, dim)
    return run


def _cumextreme_index(out: Aval, x: np.ndarray, *, dim, largest) -> np.ndarray:
    if x.dtype == np.bool_:  # the kernel compares with < and >, which bools lack: as u8 they order alike
        x = lib.cast(x, np.uint8)
    return lib.scan("cumargmax" if largest else "cumargmin", x, dim)


def _argsort(out: Aval, x: np.ndarray, *, dim, descending) -> np.ndarray:
    if x.ndim and x.shape[dim] > MAX_ROW:
        raise Unlowered(f"rows over {MAX_ROW} elements do not fit one cube")
    return lib.sort(x, dim, descending)[1]


# ---- matmul, indexing ------------------------------------------------------------------------------

def _quant_matmul(out: Aval, x, values, scales, zeros=None, *, code, block, k, n, transpose):
    why = quant.supports(block, k, transpose)
    if why:
        raise Unlowered(why)
    return quant.quant_matmul(x, values, scales, zeros, code=code, block=block, k=k, n=n, transpose=transpose)


def _gather(out: Aval, x, index, *, dim):
    return lib.gather(x, index, dim)


def _scatter(out: Aval, x, index, src, *, dim, reduce):
    return lib.scatter(x, index, src, dim, reduce)


def _index_select(out: Aval, x, index, *, dim):
    return lib.index_select(x, index, dim)


def _index_add(out: Aval, x, index, src, *, dim):
    return lib.index_add(x, index, src, dim)


def _embedding(out: Aval, weight, indices, *, padding_idx, scale_grad_by_freq):
    try:  # index_select checks the indices (on a device: one read of them, one wait)
        return lib.index_select(weight, _reshaped(indices, (indices.size,)), 0).reshape(out.shape)
    except IndexError:  # out of range: the reference raises the primitive's own error
        return registry["embedding"].reference(weight, indices, padding_idx=padding_idx,
                                               scale_grad_by_freq=scale_grad_by_freq)


# ---- creation ------------------------------------------------------------------------------------

def _full(out: Aval, *, runtime, shape, value, dtype):
    return own.fill(shape, value, dtype.np, runtime=runtime)


def _uniform(out: Aval, *, runtime, shape, dtype, low, high, seed, offset):
    return lib.uniform(shape, seed, offset, low, high, dtype, runtime=runtime)


def _normal(out: Aval, *, runtime, shape, dtype, mean, std, seed, offset):
    return lib.normal(shape, seed, offset, mean, std, dtype, runtime=runtime)


def _randint(out: Aval, *, runtime, shape, dtype, low, high, seed, offset):
    return lib.randint(shape, seed, offset, low, high, dtype.np, runtime=runtime)


# ---- convolution and pooling (the library has 2-D kernels) --------------------------------------

def _spatial_2d(op: str, arrays: tuple, params: dict, kernel: Callable) -> np.ndarray:
    """Run a 2-D conv or pool kernel; 1-D ones run as 2-D over a height of 1 (3-D ones are not lowered)."""
    nd = len(params["stride"])
    if nd == 2:
        return kernel(*arrays, **params)
    if nd != 1:
        raise Unlowered(f"{op} over {nd} spatial dims: the kernels are 2-D")
    # The new leading dim: stride, dilation and kernel 1, padding and output_padding 0.
    lifted = {k: (int(k in ("stride", "dilation", "kernel")),) + tuple(v) if isinstance(v, (tuple, list)) else v
              for k, v in params.items()}
    return kernel(*(a[:, :, None] for a in arrays), **lifted)[:, :, 0]


def _conv(out: Aval, x, w, **params):
    return _spatial_2d("conv", (x, w), params, conv_gemm.conv2d_gemm)


def _conv_transpose(out: Aval, x, w, **params):
    return _spatial_2d("conv_transpose", (x, w), params, conv_gemm.conv_transpose2d)


def _conv_weight_grad(out: Aval, x, g, **params):
    return _spatial_2d("conv_weight_grad", (x, g), params, conv_gemm.conv_weight_grad2d)


def _unfold(out: Aval, x, *, kernel, stride, padding, dilation):
    return lib.unfold(x, kernel, stride, padding, dilation)


def _fold(out: Aval, x, *, output_size, kernel, stride, padding, dilation):
    return lib.fold(x, output_size, kernel, stride, padding, dilation)


def _max_pool(out: Aval, x, **params):
    return _spatial_2d("max_pool", (x,), params, lambda x, *, kernel, stride, padding, dilation, ceil_mode:
                       lib.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode))


def _max_pool_indices(out: Aval, x, **params):
    # a 1-D pool run as 2-D over a height of 1: the flat index h * W + w is w
    return _spatial_2d("max_pool_indices", (x,), params, lambda x, *, kernel, stride, padding, dilation, ceil_mode:
                       lib.max_pool2d_indices(x, kernel, stride, padding, dilation, ceil_mode))


def _max_pool_grad(out: Aval, x, g, **params):
    if not windows_disjoint(params["kernel"], params["stride"], params["dilation"]):
        raise Unlowered("overlapping windows: their gradients add up (the kernel writes each window's taps)")
    return _spatial_2d("max_pool_grad", (x, g), params, max_pool2d_grad)


def _avg_pool(out: Aval, x, **params):
    return _spatial_2d("avg_pool", (x,), params, lambda x, *, kernel, stride, padding, ceil_mode, count_include_pad,
                       divisor_override: lib.avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad,
                                                        divisor_override))


# ---- movement: views, and copies for what a view cannot express ---------------------------------

def _reshape(out: Aval, x: np.ndarray, *, shape) -> np.ndarray:
    return _reshaped(x, shape)


def _reshaped(x: np.ndarray, shape) -> np.ndarray:
    """`x` with `shape`: a view when its strides allow, else a C-ordered copy (the cast kernel)."""
    v = x.view()
    try:
        v.shape = shape  # refuses (AttributeError) when the strides cannot express the new shape
        return v
    except AttributeError:
        return lib.cast(x, x.dtype).reshape(shape)


def _cat(out: Aval, *xs, dim):
    if not isinstance(xs[0], DeviceArray):
        return registry["cat"].reference(*xs, dim=dim)
    result = empty(out.shape, xs[0].dtype, *xs)
    start = 0
    for x in xs:
        if x.size:
            assign(result[(slice(None),) * dim + (slice(start, start + x.shape[dim]),)], x)
        start += x.shape[dim]
    return result


def _pad(out: Aval, x, *, pads, value):
    if not isinstance(x, DeviceArray):
        return registry["pad"].reference(x, pads=pads, value=value)
    result = own.fill(out.shape, value, x.dtype, x)
    if x.size:
        assign(result[tuple(slice(before, before + n) for n, (before, _) in zip(x.shape, pads))], x)
    return result


def _slice_assign(out: Aval, x, v, *, ranges):
    if not isinstance(x, DeviceArray):
        return registry["slice_assign"].reference(x, v, ranges=ranges)
    result = empty(x.shape, x.dtype, x)
    if x.size:
        assign(result, x)
    if v.size:
        assign(result[tuple(slice(*r) for r in ranges)], v)
    return result


def _reference(name: str) -> Callable:
    reference = registry[name].reference
    return lambda out, *arrays, **params: reference(*arrays, **params)


def _view(name: str) -> Lowering:
    return Lowering(_reference(name))


TABLE: dict[str, Lowering] = {
    **{name: Lowering(_elementwise(name)) for name in (*TABLE, "where", "cast")},
    **{name: Lowering(_reduce(name)) for name in ("sum", "prod", "amax", "amin")},
    **{name: Lowering(_arg_reduce(name)) for name in ("argmax", "argmin")},
    **{name: Lowering(_scan(name)) for name in ("cumsum", "cumprod")},
    "cumextreme_index": Lowering(_cumextreme_index),
    "argsort": Lowering(_argsort),
    "matmul": Lowering(lambda out, a, b: tuned_matmul(a, b)),
    "quant_matmul": Lowering(_quant_matmul),
    "int_matmul": Lowering(lambda out, a, b: quant.int_matmul(a, b)),
    "gather": Lowering(_gather),
    "scatter": Lowering(_scatter),
    "index_select": Lowering(_index_select),
    "index_add": Lowering(_index_add),
    "embedding": Lowering(_embedding),
    "full": Lowering(_full, creates=True),
    "uniform": Lowering(_uniform, creates=True),
    "normal": Lowering(_normal, creates=True),
    "randint": Lowering(_randint, creates=True),
    "conv": Lowering(_conv),
    "conv_transpose": Lowering(_conv_transpose),
    "conv_weight_grad": Lowering(_conv_weight_grad),
    "unfold": Lowering(_unfold),
    "fold": Lowering(_fold),
    "max_pool": Lowering(_max_pool),
    "max_pool_indices": Lowering(_max_pool_indices),
    "max_pool_grad": Lowering(_max_pool_grad),
    "avg_pool": Lowering(_avg_pool),
    "reshape": Lowering(_reshape),
    "permute": _view("permute"),
    "expand": _view("expand"),
    "slice": _view("slice"),
    "flip": _view("flip"),
    "cat": Lowering(_cat),
    "pad": Lowering(_pad),
    "slice_assign": Lowering(_slice_assign),
}
