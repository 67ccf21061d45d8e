"""Indexing ONNX ops: Gather/Scatter families, OneHot, NonZero, Compress, TopK, ArgMax, Unique.

ONNX indices may be negative (counted from the end); they are wrapped on the device before ember's
gather/scatter see them. Ops whose output shape depends on the data (NonZero, Compress, Unique) read
it on the host, as ember's own `nonzero` and `unique` do.

Example:
    >>> OPS[("", "Gather")](call, x, indices)   # axis from the node
"""

from __future__ import annotations

import math

import numpy as np

from ...api import math as M
from ...api import reduce as R
from ...api import shape as S
from ...api.creation import arange
from ...api.index import index_select, nonzero, scatter, scatter_reduce
from ...dtype import i64
from .registry import op


def _wrap(index, n: int):
    index = index.cast(i64)
    return M.where(index < 0, index + n, index)


@op("Gather")
def gather(call, x, index):
    axis = call.attr("axis", 0) % x.ndim
    flat = _wrap(index, x.shape[axis]).reshape(-1)
    out = index_select(x, axis, flat)
    return out.reshape(*x.shape[:axis], *index.shape, *x.shape[axis + 1:])


@op("GatherElements")
def gather_elements(call, x, index):
    axis = call.attr("axis", 0) % x.ndim
    return R.gather(x, axis, _wrap(index, x.shape[axis]))


def _linear(x_shape, index, b: int):
    """Flat positions into x's dims b..b+k of the last dim (k) of `index` (the batch dims b first)."""
    k = index.shape[-1]
    dims = x_shape[b:b + k]
    strides = [math.prod(dims[j + 1:]) for j in range(k)]
    index = index.cast(i64)
    flat = None
    for j in range(k):
        part = _wrap(index[..., j], dims[j]) * strides[j]
        flat = part if flat is None else flat + part
    if flat is None:
        flat = index.sum(-1)
    return flat, math.prod(dims)


@op("GatherND")
def gather_nd(call, x, index):
    b = call.attr("batch_dims", 0)
    k = index.shape[-1]
    flat, inner = _linear(x.shape, index, b)
    batch = math.prod(x.shape[:b])
    rest = x.shape[b + k:]
    offsets = (arange(batch, device=x.device) * inner).reshape(batch, *[1] * (flat.ndim - b))
    positions = flat.reshape(batch, *flat.shape[b:]) + offsets
    table = x.reshape(batch * inner, *rest)
    out = index_select(table, 0, positions.reshape(-1))
    return out.reshape(*index.shape[:-1], *rest)


_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


def _scatter(call, x, axis, index, updates):
    reduction = call.attr("reduction", "none")
    if reduction == "none":
        return scatter(x, axis, index, updates)
    if reduction not in _REDUCE:
        call.unsupported(f"reduction {reduction!r} (known: none, add, mul, max, min)")
    return scatter_reduce(x, axis, index, updates, _REDUCE[reduction])


@op("ScatterElements", "Scatter")
def scatter_elements(call, x, index, updates):
    axis = call.attr("axis", 0) % x.ndim
    return _scatter(call, x, axis, _wrap(index, x.shape[axis]), updates)


@op("ScatterND")
def scatter_nd(call, x, index, updates):
    k = index.shape[-1]
    flat, inner = _linear(x.shape, index, 0)
    rest = x.shape[k:]
    flat = flat.reshape(-1)
    table = x.reshape(inner, *rest)
    src = updates.reshape(flat.shape[0], *rest)
    where = flat.reshape(-1, *[1] * len(rest)).expand(flat.shape[0], *rest)
    return _scatter(call, table, 0, where, src).reshape(x.shape)


@op("OneHot")
def one_hot(call, index, depth, values):
    axis = call.attr("axis", -1)
    n = int(call.host(depth).reshape(-1)[0])
    index = index.cast(i64) if not index.dtype.is_float else index.cast(i64)
    index = M.where(index < 0, index + n, index)
    hot = index.unsqueeze(-1) == arange(n, device=index.device)
    off, on = values[0], values[1]
    out = M.where(hot, on, off)
    return S.movedim(out, -1, axis % out.ndim)


@op("NonZero")
def non_zero(call, x):
    if x.ndim == 0:
        return call.const(np.zeros((0, int(call.host(x).item() != 0)), np.int64))
    return nonzero(x).cast(i64).T


@op("Compress")
def compress(call, x, condition):
    keep = np.nonzero(call.host(condition).astype(bool))[0]
    axis = call.attr("axis")
    if axis is None:
        x, axis = x.reshape(-1), 0
    keep = keep[keep < x.shape[axis]]
    return index_select(x, axis % x.ndim, call.const(keep.astype(np.int64)))


@op("TopK")
def top_k(call, x, k=None):
    k = call.attr("k") if call.opset < 10 else int(call.host(k).reshape(-1)[0])
    axis = call.attr("axis", -1) % x.ndim
    largest = bool(call.attr("largest", 1))
    values, indices = R.topk(x, k, axis, largest=largest, sorted=True)
    return values, indices.cast(i64)


def _arg(call, x, fn):
    axis = call.attr("axis", 0) % max(x.ndim, 1)
    keep = bool(call.attr("keepdims", 1))
    if call.attr("select_last_index", 0):
        n = x.shape[axis]
        return (n - 1 - fn(S.flip(x, axis), axis, keep).cast(i64))
    return fn(x, axis, keep).cast(i64)


@op("ArgMax")
def arg_max(call, x):
    return _arg(call, x, R.argmax)


@op("ArgMin")
def arg_min(call, x):
    return _arg(call, x, R.argmin)


@op("Unique")
def unique(call, x):
    a = call.host(x)
    axis = call.attr("axis")
    values, first, inverse, counts = np.unique(a, return_index=True, return_inverse=True,
                                               return_counts=True, axis=axis)
    if not call.attr("sorted", 1):
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        values = np.take(values, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse.reshape(-1)]
    as_i64 = lambda v: call.const(np.asarray(v, np.int64).reshape(-1))  # noqa: E731
    return call.const(values), as_i64(first), as_i64(inverse), as_i64(counts)


@op("TensorScatter")
def tensor_scatter(call, cache, update, write_indices=None):
    """`update` written into `cache` along `axis` from each batch item's write index (wrapping round
    the axis in mode "circular"): one scatter on the device."""
    axis = call.attr("axis", -2) % cache.ndim
    b, steps, size = cache.shape[0], update.shape[axis], cache.shape[axis]
    start = write_indices.cast(i64) if write_indices is not None else arange(b, device=cache.device) * 0
    shape = [1] * update.ndim
    shape[axis] = steps
    where = start.reshape(b, *[1] * (update.ndim - 1)) + arange(steps, device=cache.device).reshape(*shape)
    if call.attr("mode", "linear") == "circular":
        where = where % size
    return scatter(cache, axis, S.broadcast_to(where, update.shape), update)
