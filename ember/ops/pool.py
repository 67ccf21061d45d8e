"""Pooling primitives over any number of spatial dims: `max_pool`, `max_pool_indices`, `avg_pool`.

Params arrive normalized from `ember.nn.functional` (one int per spatial dim for `kernel`, `stride`,
`padding`, `dilation`). Output sizes follow PyTorch: floor((n + 2p - d(k - 1) - 1) / s) + 1, or the
ceiling with `ceil_mode`, where a last window must start inside the input or its left padding.

- `max_pool`: y = max over each window (padding never wins; NaN propagates). Its gradient sends each
  output's cotangent to the input position that won, found by `max_pool_indices` and summed with
  `scatter_add`.
- `max_pool_grad`: max_pool's input gradient, g sent to each window's winner (0 elsewhere, summed where
  windows overlap); its gradient with respect to g gathers at the winners.
- `max_pool_indices`: the winning position of each window as a flat index into the spatial dims of the
  input (PyTorch's `return_indices`), first one on ties. An integer output: no gradient.
- `avg_pool`: y = sum over each window / divisor, the divisor being the window's size clipped to the
  padded input (`count_include_pad`), or clipped to the input itself, or `divisor_override`. Its
  gradient is a depthwise `conv_transpose` with a kernel of ones.

Example:
    >>> registry["max_pool"].infer(Aval((1, 3, 7, 7), f32), kernel=(2, 2), stride=(2, 2), padding=(0, 0),
    ...                            dilation=(1, 1), ceil_mode=True)
    Aval(shape=(1, 3, 4, 4), dtype=f32)
"""

from __future__ import annotations

import math

import numpy as np

from ..dtype import i64
from ..errors import DTypeError, ShapeError
from .primitive import Aval, primitive, saves_inputs, saves_none
from .spatial import call, check_float, check_layout, compute_dtype, pad_spatial, pool_out_size, window_view


def _out_size(op: str, shape, kernel, stride, padding, dilation, ceil_mode) -> tuple[int, ...]:
    for k, p in zip(kernel, padding):
        if p < 0 or 2 * p > k:
            raise ShapeError(op, f"padding {tuple(padding)} must be at most half of kernel size {tuple(kernel)}")
    return tuple(pool_out_size(op, *a, ceil_mode) for a in zip(shape, kernel, stride, padding, dilation))


def _windows(x: np.ndarray, kernel, stride, padding, dilation, out, value) -> np.ndarray:
    """(N, C, *kernel, *out) windows of `x` padded with `value`, right-padded further where ceil_mode
    lets the last window run past the padding."""
    after = tuple(max(p, (o - 1) * s + d * (k - 1) + 1 - n - p)
                  for n, k, s, p, d, o in zip(x.shape[2:], kernel, stride, padding, dilation, out))
    return window_view(pad_spatial(x, padding, after, value), kernel, stride, dilation, out)


def _taps(windows: np.ndarray, kernel):
    """Each kernel offset's (N, C, *out) view of a window view, in row-major kernel order.

    Reducing tap by tap (prod(kernel) elementwise ops over whole maps) is much faster than a NumPy
    reduction over the small, strided kernel axes.
    """
    for k in np.ndindex(*kernel):
        yield windows[(slice(None), slice(None)) + k]


def _lowest(dtype: np.dtype):
    return -np.inf if dtype.kind in "fV" else np.iinfo(dtype).min


# ---- max_pool ------------------------------------------------------------------------------------

def _max_infer(x: Aval, *, kernel, stride, padding, dilation, ceil_mode) -> Aval:
    check_layout("max_pool", x.shape, len(kernel))
    if x.dtype.is_bool:
        raise DTypeError("max_pool: not defined for bool tensors")
    out = _out_size("max_pool", x.shape[2:], kernel, stride, padding, dilation, ceil_mode)
    return Aval(x.shape[:2] + out, x.dtype)


def _max_reference(x, *, kernel, stride, padding, dilation, ceil_mode):
    out = _out_size("max_pool", x.shape[2:], kernel, stride, padding, dilation, ceil_mode)
    taps = _taps(_windows(x, kernel, stride, padding, dilation, out, _lowest(x.dtype)), kernel)
    result = next(taps).copy()
    for tap in taps:
        np.maximum(result, tap, out=result)  # NaN propagates, as in PyTorch
    return result


def windows_disjoint(kernel, stride, dilation) -> bool:
    """Whether no two pooling windows share an input position (then their winners are distinct).

    Example:
        >>> windows_disjoint((2, 2), (2, 2), (1, 1)), windows_disjoint((3, 3), (2, 2), (1, 1))
        (True, False)
    """
    return all(s >= d * (k - 1) + 1 for k, s, d in zip(kernel, stride, dilation))


def _max_vjp(ctx, g):
    x, = ctx.inputs
    p = ctx.params
    if windows_disjoint(p["kernel"], p["stride"], p["dilation"]):
        return (call("max_pool_grad", x, g, **p),)  # one kernel: no index array, no zero fill, no scatter
    (shape, _), = ctx.input_avals
    index = call("max_pool_indices", x, **p)
    flat = g.new_zeros(shape[:2] + (math.prod(shape[2:]),))
    return (flat.scatter_add(2, index.flatten(2), g.flatten(2)).reshape(shape),)


primitive("max_pool", infer=_max_infer, vjp=_max_vjp, cost="compute", saves=saves_inputs)(_max_reference)


# ---- max_pool_grad -------------------------------------------------------------------------------

def _grad_infer(x: Aval, g: Aval, **params) -> Aval:
    out = _max_infer(x, **params)
    if g.shape != out.shape or g.dtype != x.dtype:
        raise ShapeError("max_pool_grad", f"gradient {g.shape} {g.dtype} does not fit the pool of {x.shape} "
                                          f"{x.dtype} (output {out.shape})")
    return x


def _grad_reference(x, g, *, kernel, stride, padding, dilation, ceil_mode):
    index = _indices_reference(x, kernel=kernel, stride=stride, padding=padding, dilation=dilation,
                               ceil_mode=ceil_mode)
    flat = np.zeros(x.shape[:2] + (math.prod(x.shape[2:]),), g.dtype)
    index, values = (a.reshape(a.shape[:2] + (math.prod(a.shape[2:]),)) for a in (index, g))
    if windows_disjoint(kernel, stride, dilation):  # distinct winners: a plain put, not NumPy's slow `add.at`
        np.put_along_axis(flat, index, values, axis=2)
    else:
        np.add.at(flat, (np.arange(flat.shape[0])[:, None, None], np.arange(flat.shape[1])[:, None], index), values)
    return flat.reshape(x.shape)


def _grad_vjp(ctx, h):
    x, _ = ctx.inputs
    _, (gshape, _) = ctx.input_avals
    index = call("max_pool_indices", x, **ctx.params)
    return None, h.flatten(2).gather(2, index.flatten(2)).reshape(gshape)


primitive("max_pool_grad", infer=_grad_infer, vjp=_grad_vjp, cost="compute", saves=saves_inputs)(_grad_reference)


# ---- max_pool_indices ----------------------------------------------------------------------------

def _indices_infer(x: Aval, **params) -> Aval:
    return Aval(_max_infer(x, **params).shape, i64)


def _indices_reference(x, *, kernel, stride, padding, dilation, ceil_mode):
    out = _out_size("max_pool", x.shape[2:], kernel, stride, padding, dilation, ceil_mode)
    best = _max_reference(x, kernel=kernel, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)
    taps = list(_taps(_windows(x, kernel, stride, padding, dilation, out, _lowest(x.dtype)), kernel))
    # PyTorch's rule: a strictly larger value wins, so among taps equal to the maximum the first one does;
    # walking the taps backwards, `which` takes j wherever tap j equals the maximum (branch-free
    # arithmetic: NumPy's masked copies are several times slower).
    which = np.full(best.shape, len(taps), dtype=np.uint8 if len(taps) < 255 else np.int64)
    equal = np.empty(best.shape, dtype=np.bool_)
    for j in range(len(taps) - 1, -1, -1):
        np.equal(taps[j], best, out=equal)
        which -= equal * (which - j)
    if x.dtype.kind in "fV" and np.isnan(best).any():
        # A NaN wins too, and so does every later NaN: the last NaN of a window is its winner.
        for j, tap in enumerate(taps):
            which = np.where(np.isnan(tap), j, which)
    # The flat input index of tap j of output o depends on (o, j) only: gather it from a small table.
    table = _index_table(x.shape[2:], out, kernel, stride, padding, dilation)
    return table.take(which + np.arange(0, table.size, table.shape[-1]).reshape(out))


def _index_table(size, out, kernel, stride, padding, dilation) -> np.ndarray:
    """(*out, prod(kernel)) flat input indices of each window's taps, row-major over the kernel.

    A tap in the padding (which wins only when its whole window is -inf or the dtype's minimum) names
    the window's first position inside the input along that dim, as PyTorch does.
    """
    nd = len(kernel)
    flat = np.zeros((1,) * (2 * nd), dtype=np.int64)
    for axis, (n, o, k, s, p, d) in enumerate(zip(size, out, kernel, stride, padding, dilation)):
        pos = (np.arange(o) * s - p)[:, None] + np.arange(k) * d
        pos = np.where(pos < 0, pos + d * ((d - 1 - pos) // d), pos)
        shape = [1] * (2 * nd)
        shape[axis], shape[nd + axis] = o, k
        flat = flat * n + pos.reshape(shape)
    return flat.reshape(tuple(out) + (math.prod(kernel),))


primitive("max_pool_indices", infer=_indices_infer, cost="compute")(_indices_reference)


# ---- avg_pool ------------------------------------------------------------------------------------

def _avg_infer(x: Aval, *, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override) -> Aval:
    check_layout("avg_pool", x.shape, len(kernel))
    check_float("avg_pool", x)
    if divisor_override is not None and divisor_override == 0:
        raise ShapeError("avg_pool", "divisor_override must be non-zero")
    out = _out_size("avg_pool", x.shape[2:], kernel, stride, padding, (1,) * len(kernel), ceil_mode)
    return Aval(x.shape[:2] + out, x.dtype)


def _divisor(size, out, kernel, stride, padding, count_include_pad, divisor_override) -> np.ndarray:
    """The (*out) array of window divisors (PyTorch's rule: clip to the padded input, or to the input)."""
    if divisor_override is not None:
        return np.full(out, float(divisor_override))
    total = np.ones(out)
    for axis, (n, o, k, s, p) in enumerate(zip(size, out, kernel, stride, padding)):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, n + p)
        count = end - start if count_include_pad else np.minimum(end, n) - np.maximum(start, 0)
        total = total * count.reshape((-1,) + (1,) * (len(out) - 1 - axis))
    return total


def _avg_reference(x, *, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    nd = len(kernel)
    out = _out_size("avg_pool", x.shape[2:], kernel, stride, padding, (1,) * nd, ceil_mode)
    acc = compute_dtype(x.dtype)
    taps = _taps(_windows(x.astype(acc, copy=False), kernel, stride, padding, (1,) * nd, out, 0), kernel)
    sums = next(taps).copy()
    for tap in taps:
        sums += tap
    divisor = _divisor(x.shape[2:], out, kernel, stride, padding, count_include_pad, divisor_override)
    return (sums / divisor.astype(acc)).astype(x.dtype, copy=False)


def _avg_vjp(ctx, g):
    (shape, _), = ctx.input_avals
    p = ctx.params
    nd = len(p["kernel"])
    divisor = _divisor(shape[2:], g.shape[2:], p["kernel"], p["stride"], p["padding"], p["count_include_pad"],
                       p["divisor_override"])
    scaled = g / g.new_tensor(divisor)
    # Each input pixel collects the scaled cotangent of every window it lies in: the adjoint of a
    # depthwise convolution with a kernel of ones.
    kernel = g.new_ones(shape[1], 1, *p["kernel"])
    extra = tuple(n + 2 * pad - ((o - 1) * s + k) for n, o, k, s, pad in
                  zip(shape[2:], g.shape[2:], p["kernel"], p["stride"], p["padding"]))
    gx = call("conv_transpose", scaled, kernel, stride=p["stride"], padding=p["padding"], output_padding=extra,
              dilation=(1,) * nd, groups=shape[1])
    return (gx,)


primitive("avg_pool", infer=_avg_infer, vjp=_avg_vjp, cost="compute", saves=saves_none)(_avg_reference)
