"""Search and scatter-reduce primitives: `searchsorted`, `scatter_reduce`, and the sampling ops
`randperm` and `multinomial` (pure functions of the random stream's `(seed, offset)`).

None of them has a cube kernel: the Cube and torch backends run the NumPy reference (listed in their
`fallbacks`), so the numbers of the random ones are the same on every device.

Example:
    >>> registry["searchsorted"].infer(Aval((5,), f32), Aval((2, 3), f32), right=False, out_int32=False)
    Aval(shape=(2, 3), dtype=i64)
"""

from __future__ import annotations

import numpy as np

from .. import random as _stream
from ..dtype import DType, i32, i64
from ..errors import DTypeError, ShapeError
from .indexing import _check_bounds, _full_index, _scatter_infer
from .primitive import Aval, is_half, primitive


# ---- searchsorted --------------------------------------------------------------------------------

def _searchsorted_infer(seq: Aval, values: Aval, *, right: bool, out_int32: bool) -> Aval:
    if seq.dtype is not values.dtype:
        raise DTypeError(f"searchsorted: sorted_sequence ({seq.dtype}) and values ({values.dtype}) "
                         "must have one dtype")
    if len(seq.shape) == 0:
        raise ShapeError("searchsorted", "sorted_sequence must have at least one dimension")
    if len(seq.shape) > 1 and seq.shape[:-1] != values.shape[:-1]:
        raise ShapeError("searchsorted", f"sorted_sequence of shape {seq.shape} and values of shape "
                                         f"{values.shape} must agree in all but the last dim")
    return Aval(values.shape, i32 if out_int32 else i64)


def _searchsorted_reference(seq, values, *, right, out_int32):
    side = "right" if right else "left"
    if is_half(seq.dtype):
        seq, values = seq.astype(np.float32), values.astype(np.float32)
    if seq.ndim == 1:
        out = np.searchsorted(seq, values, side=side)
    else:
        rows_s, rows_v = seq.reshape(-1, seq.shape[-1]), values.reshape(-1, values.shape[-1])
        out = np.stack([np.searchsorted(s, v, side=side) for s, v in zip(rows_s, rows_v)]) \
            if rows_s.shape[0] else np.zeros(rows_v.shape, np.int64)
    return np.asarray(out).reshape(values.shape).astype(np.int32 if out_int32 else np.int64)


primitive("searchsorted", infer=_searchsorted_infer, cost="compute")(_searchsorted_reference)


# ---- scatter_reduce ------------------------------------------------------------------------------

REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")
_UFUNC = {"sum": np.add, "mean": np.add, "prod": np.multiply, "amax": np.maximum, "amin": np.minimum}


def _scatter_reduce_infer(x: Aval, index: Aval, src: Aval, *, dim: int, reduce: str, include_self: bool) -> Aval:
    if reduce not in REDUCTIONS:
        raise ValueError(f"scatter_reduce: reduce must be one of {', '.join(REDUCTIONS)}, got {reduce!r}")
    if x.dtype.is_bool:
        raise DTypeError("scatter_reduce: bool tensors are not supported")
    return _scatter_infer(x, index, src, dim=dim, reduce=None)


def _identity(reduce: str, dtype: np.dtype):
    """The value a position starts from when `include_self=False` (neutral for the reduction)."""
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return info.min if reduce == "amax" else info.max
    return -np.inf if reduce == "amax" else np.inf


def _scatter_reduce_reference(x, index, src, *, dim, reduce, include_self):
    _check_bounds("scatter_reduce", index, x.shape[dim] if x.ndim else 1, dim)
    shape = x.shape
    if x.ndim == 0:
        x, index, src = x.reshape(1), index.reshape(1), src.reshape(1)
    wide = np.float32 if is_half(x.dtype) else x.dtype
    out = x.astype(wide)
    where = _full_index(index, dim)
    values = src[tuple(slice(0, n) for n in index.shape)].astype(wide)
    if not include_self:
        out[where] = _identity(reduce, out.dtype)
    _UFUNC[reduce].at(out, where, values)
    if reduce == "mean":
        count = np.full(out.shape, 1 if include_self else 0, np.int64)
        np.add.at(count, where, 1)
        count = np.maximum(count, 1)
        out = out // count if np.issubdtype(out.dtype, np.integer) else out / count
    return out.astype(x.dtype).reshape(shape)


def _scatter_reduce_vjp(ctx, g):
    """PyTorch's rules: sum and mean spread `g` back (mean divided by the count), amax/amin share it
    evenly among the elements equal to the result, prod divides the product by each factor (zeros
    handled as PyTorch does: a single zero gets the product of the others). With
    `include_self=False` the positions that received a value give `x` no gradient."""
    x, index, src = ctx.inputs
    out = ctx.output
    dim, reduce, inc = ctx.params["dim"], ctx.params["reduce"], ctx.params["include_self"]
    src_part = src[tuple(slice(0, n) for n in index.shape)]
    hit = g.new_zeros(x.shape).scatter(dim, index, 1.0) if x.ndim else g.new_full((), 1.0)
    keep_self = g.new_full(x.shape, 1.0) if inc else 1 - hit
    if reduce == "sum":
        gx, gsrc = g * keep_self, g.gather(dim, index)
    elif reduce == "mean":
        count = (keep_self.scatter_add(dim, index, g.new_full(index.shape, 1.0))).clamp(min=1)
        gx, gsrc = g * keep_self / count, (g / count).gather(dim, index)
    elif reduce in ("amax", "amin"):
        # PyTorch counts `x` among the ties even when `include_self=False` (its gradient then gets none)
        self_mask = (x == out).cast(g.dtype)
        src_mask = (src_part == out.gather(dim, index)).cast(g.dtype)
        count = self_mask.scatter_add(dim, index, src_mask)
        gx, gsrc = g * self_mask * keep_self / count, (g / count).gather(dim, index) * src_mask
    else:
        gx, gsrc = _prod_grads(x, index, src_part, out, g, dim, inc)
        gx = gx * keep_self
    pads = [(0, s - n) for s, n in zip(src.shape, index.shape)]
    if any(p for _, p in pads):
        gsrc = gsrc.pad([p for pair in reversed(pads) for p in pair])
    return gx, None, gsrc


def _prod_grads(x, index, src, out, g, dim, inc):
    """The gradients of a scatter-reduced product, exact where factors are zero."""
    masked_x = x.masked_fill(x == 0, 1)
    gx = g * masked_x.scatter_reduce(dim, index, src, "prod", include_self=inc) / masked_x
    src_zero = src == 0
    zeros = x.new_zeros(x.shape).scatter_add(dim, index, src_zero.cast(x.dtype)).gather(dim, index)
    single_zero = src_zero & (zeros == 1)
    masked_src_result = x.scatter_reduce(dim, index, src.masked_fill(single_zero, 1), "prod", include_self=inc)
    gsrc = ((g * masked_src_result).gather(dim, index)).where(
        single_zero, (g * out).gather(dim, index) / src.masked_fill(src_zero, 1))
    return gx, gsrc


primitive("scatter_reduce", infer=_scatter_reduce_infer, vjp=_scatter_reduce_vjp,
          cost="compute")(_scatter_reduce_reference)


# ---- sampling ------------------------------------------------------------------------------------

def _randperm_infer(*, shape: tuple[int, ...], dtype: DType, seed: int, offset: int) -> Aval:
    return Aval(shape, dtype)


@primitive("randperm", infer=_randperm_infer, cost="compute")
def randperm(*, shape, dtype, seed, offset):
    """The order that sorts one 64-bit draw per position (stable, so equal draws keep theirs)."""
    keys = _stream.words64(shape[0], seed, offset)
    return np.argsort(keys, kind="stable").astype(dtype.np)


def _multinomial_infer(probs: Aval, *, num_samples: int, replacement: bool, seed: int, offset: int) -> Aval:
    if not probs.dtype.is_float:
        raise DTypeError(f"multinomial: probabilities must be a float tensor, got {probs.dtype}")
    if len(probs.shape) not in (1, 2):
        raise ShapeError("multinomial", f"probabilities must be 1-d or 2-d, got shape {probs.shape}")
    if not replacement and num_samples > probs.shape[-1]:
        raise ValueError(f"multinomial: cannot draw {num_samples} samples from {probs.shape[-1]} "
                         "categories without replacement")
    return Aval(probs.shape[:-1] + (num_samples,), i64)


@primitive("multinomial", infer=_multinomial_infer, cost="compute")
def multinomial(probs, *, num_samples, replacement, seed, offset):
    """With replacement: inverse CDF of f64 uniform draws. Without: the `num_samples` smallest keys
    `E / p` with `E` exponential draws (zero-probability categories come last)."""
    p = probs.astype(np.float64).reshape(-1, probs.shape[-1])
    rows, n = p.shape
    if replacement:
        u = _stream.uniform((rows, num_samples), np.float64, 0.0, 1.0, seed, offset)
        cdf = np.cumsum(p, axis=1)
        cdf /= cdf[:, -1:]
        out = np.stack([np.searchsorted(c, r, side="right") for c, r in zip(cdf, u)]) if rows else u
        out = np.minimum(out, n - 1)
    else:
        u = _stream.uniform((rows, n), np.float64, 0.0, 1.0, seed, offset)
        with np.errstate(divide="ignore"):
            keys = -np.log1p(-u) / p
        out = np.argsort(keys, axis=1, kind="stable")[:, :num_samples]
    return out.astype(np.int64).reshape(probs.shape[:-1] + (num_samples,))
