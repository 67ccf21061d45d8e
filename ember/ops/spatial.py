"""Helpers shared by the spatial module ops (conv, pool, unfold): output sizes, window views, col2im.

Layout is PyTorch's, (N, C, *spatial), for any number of spatial dims. Every op is built on one pair of
adjoint array operations:

- `window_view(x, kernel, stride, dilation, out)`: a zero-copy (N, C, *kernel, *out) view whose element
  [n, c, k.., o..] is x[n, c, o*stride + k*dilation ..] (im2col without the copy; kernel dims first so
  that copying it walks the input in order, and so that it reshapes straight to PyTorch's `unfold`);
- `col2im(cols, size, stride, dilation)`: its adjoint, summing such windows back into an array of `size`.

Example:
    >>> window_view(np.arange(5.0).reshape(1, 1, 5), (2,), (2,), (1,), (2,))[0, 0]
    array([[0., 2.],
           [1., 3.]])
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..errors import DTypeError, ShapeError
from .primitive import is_half, registry


COLUMN_BUDGET = 1 << 24
"""How many elements of im2col columns (or col2im patches) are built at once. Larger batches go in
slices: memory stays bounded (64 MiB of f32) and the working set stays nearer the caches."""


def batch_slices(n: int, per_sample: int) -> list[slice]:
    """Slices of a batch of `n` whose columns of `per_sample` elements each fit `COLUMN_BUDGET`.

    Example:
        >>> batch_slices(5, COLUMN_BUDGET // 2)
        [slice(0, 2, None), slice(2, 4, None), slice(4, 5, None)]
    """
    step = max(1, COLUMN_BUDGET // max(per_sample, 1))
    return [slice(i, min(i + step, n)) for i in range(0, n, step)] or [slice(0, 0)]


def conv_out_size(op: str, size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    """Output length of a strided window sweep: floor((size + 2p - d(k - 1) - 1) / s) + 1.

    Example:
        >>> conv_out_size("conv", 28, kernel=3, stride=2, padding=1, dilation=1)
        14
    """
    span = dilation * (kernel - 1) + 1
    if size + 2 * padding < span:
        raise ShapeError(op, f"input size {size} padded by {padding} on each side is smaller than the "
                             f"kernel's extent {span} (kernel {kernel}, dilation {dilation})")
    return (size + 2 * padding - span) // stride + 1


def pool_out_size(op: str, size: int, kernel: int, stride: int, padding: int, dilation: int,
                  ceil_mode: bool) -> int:
    """PyTorch's pooling output length; with `ceil_mode` the last window may run past the input, but
    it must start inside the input or its left padding.

    Example:
        >>> pool_out_size("max_pool", 7, kernel=2, stride=2, padding=0, dilation=1, ceil_mode=True)
        4
    """
    span = dilation * (kernel - 1) + 1
    if size + 2 * padding < span:
        raise ShapeError(op, f"input size {size} padded by {padding} on each side is smaller than the "
                             f"kernel's extent {span} (kernel {kernel}, dilation {dilation})")
    room = size + 2 * padding - span
    out = (-(-room // stride) if ceil_mode else room // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


def check_layout(op: str, x_shape: tuple[int, ...], nd: int, what: str = "input") -> None:
    """`x_shape` must be (N, C, *spatial) with `nd` spatial dims; raises `ShapeError` naming `op`.

    Example:
        >>> check_layout("conv", (8, 3, 28, 28), 2)
    """
    if len(x_shape) != nd + 2:
        raise ShapeError(op, f"{what} of shape {x_shape} is not (N, C, {', '.join(['*'] * nd)}) for "
                             f"{nd} spatial dims")


def check_float(op: str, *avals) -> None:
    """Floating inputs of one dtype (convolutions and averages are not defined on ints here).

    Example:
        >>> check_float("conv", Aval((2, 3), f32), Aval((3, 3), f32))
    """
    first = avals[0].dtype
    for a in avals:
        if not a.dtype.is_float:
            raise DTypeError(f"{op}: needs floating-point tensors, got {a.dtype}")
        if a.dtype is not first:
            raise DTypeError(f"{op}: tensors must share a dtype, got {first} and {a.dtype}")


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype to accumulate in: f32 for f16/bf16 (as PyTorch's CPU kernels do), else `dtype`.

    Example:
        >>> compute_dtype(np.dtype(np.float16))
        dtype('float32')
    """
    return np.dtype(np.float32) if is_half(dtype) else dtype


def pad_spatial(x: np.ndarray, before, after, value=0) -> np.ndarray:
    """`x` padded by `before[i]`/`after[i]` along spatial dim i (no copy when nothing is padded).

    Example:
        >>> pad_spatial(np.ones((1, 1, 2)), (1,), (0,)).tolist()
        [[[0.0, 1.0, 1.0]]]
    """
    if not any(before) and not any(after):
        return x
    pads = [(0, 0), (0, 0)] + list(zip(before, after))
    return np.pad(x, pads, constant_values=np.asarray(value).astype(x.dtype))


def window_view(x: np.ndarray, kernel, stride, dilation, out) -> np.ndarray:
    """The (N, C, *kernel, *out) read-only view of windows of `x` (see the module docs).

    `x` must already be padded: its spatial size must cover (out - 1) * stride + (kernel - 1) * dilation
    + 1 along each dim.
    """
    lead = x.strides[:2]
    spatial = x.strides[2:]
    strides = lead + tuple(t * d for t, d in zip(spatial, dilation)) + tuple(t * s for t, s in zip(spatial, stride))
    shape = x.shape[:2] + tuple(kernel) + tuple(out)
    return as_strided(x, shape, strides, writeable=False)


def col2im(cols: np.ndarray, size, stride, dilation, out: np.ndarray | None = None) -> np.ndarray:
    """Windows (N, C, *kernel, *out) summed into zeros of (N, C, *size): the adjoint of `window_view`.

    `out`, when given, is a zeroed array of that shape to sum into (saving a copy for callers that
    assemble a batch in slices).

    Example:
        >>> col2im(np.ones((1, 1, 2, 2)), (3,), (1,), (1,)).tolist()   # two windows of 2 over 3
        [[[1.0, 2.0, 1.0]]]
    """
    nd = len(size)
    kernel, windows = cols.shape[2:2 + nd], cols.shape[2 + nd:]
    result = np.zeros(cols.shape[:2] + tuple(size), dtype=cols.dtype) if out is None else out
    if 0 in windows or 0 in cols.shape[:2]:
        return result
    # One strided add per kernel offset: prod(kernel) vectorized adds instead of a loop over windows.
    for k in np.ndindex(*kernel):
        target = tuple(slice(ki * d, ki * d + (o - 1) * s + 1, s) for ki, d, o, s in zip(k, dilation, windows, stride))
        result[(slice(None), slice(None)) + target] += cols[(slice(None), slice(None)) + k]
    return result


def crop(x: np.ndarray, start, length) -> np.ndarray:
    """Spatial dim i of `x` restricted to [start[i], start[i] + length[i]).

    Example:
        >>> crop(np.arange(5).reshape(1, 1, 5), (1,), (3,)).tolist()
        [[[1, 2, 3]]]
    """
    return x[(slice(None), slice(None)) + tuple(slice(a, a + n) for a, n in zip(start, length))]


def call(name: str, *inputs, **params):
    """Bind the registered primitive `name` to tensors: how gradient rules apply companion primitives.

    The tensor layer's `apply` does the same; rules sit below it, so they bind through the tensors they
    are given (`Tensor._bind`, the tensor layer's `bind`).

    Example:
        >>> gx = call("conv_transpose", g, w, stride=(1,), padding=(0,), output_padding=(0,),
        ...           dilation=(1,), groups=1)
    """
    return inputs[0]._bind(registry[name], inputs, params)
