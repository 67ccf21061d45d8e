"""Reduction, scan and sort primitives over dims.

`sum`, `prod`, `amax`, `amin` reduce over a tuple of dims (already normalized by the tensor layer) with
`keepdim`; `argmax`/`argmin` over one dim; `cumsum`/`cumprod` scan one dim; `cumextreme_index` gives the
index of the running max or min (PyTorch's `cummax`/`cummin` indices); `argsort` sorts one dim.
Index outputs are i64 and carry no gradient; values of max-with-indices, sort and topk are `gather`s of
these indices in the tensor layer, so their gradients flow through `gather`.

Half-precision sums and products accumulate in f32, as PyTorch does.

Example:
    >>> registry["sum"].infer(Aval((2, 3), f32), dims=(1,), keepdim=False)
    Aval(shape=(2,), dtype=f32)
"""

from __future__ import annotations

import numpy as np

from ..dtype import i64
from ..errors import ShapeError
from .constants import kept
from .primitive import Aval, is_half, primitive, saves_none


def _reduced_shape(shape, dims, keepdim):
    if len(dims) == len(shape):  # the common full reduction
        return (1,) * len(shape) if keepdim else ()
    if keepdim:
        return tuple(1 if i in dims else n for i, n in enumerate(shape))
    return tuple(n for i, n in enumerate(shape) if i not in dims)


def _reduce_infer(name: str, needs_elements: bool = False):
    def infer(x: Aval, *, dims: tuple[int, ...], keepdim: bool) -> Aval:
        if needs_elements and any(x.shape[d] == 0 for d in dims):
            raise ShapeError(name, f"cannot reduce over an empty dimension of shape {x.shape}")
        return Aval(_reduced_shape(x.shape, dims, keepdim), x.dtype)

    return infer


def _accumulate(ufunc):
    def run(x, *, dims, keepdim):
        if is_half(x.dtype):
            return ufunc.reduce(x.astype(np.float32), axis=dims, keepdims=keepdim).astype(x.dtype)
        return np.asarray(ufunc.reduce(x, axis=dims, keepdims=keepdim, dtype=x.dtype))

    return run


def _restore(g, ctx):
    """Bring a reduced cotangent back to the input's rank (undoing keepdim=False)."""
    if ctx.params["keepdim"]:
        return g
    shape = _reduced_shape(ctx.input_avals[0].shape, ctx.params["dims"], True)
    return g.reshape(shape)


def _sum_vjp(ctx, g):
    return (_restore(g, ctx).expand(ctx.input_avals[0].shape),)


def _prod_vjp(ctx, g):
    # Exact with zeros: a slice with one zero sends the product of the others to that zero's place.
    x, = ctx.inputs
    dims = ctx.params["dims"]
    g = _restore(g, ctx)
    zero = x == 0
    nonzero_prod = x.masked_fill(zero, 1).prod(dim=dims, keepdim=True)
    zeros = zero.cast(i64).sum(dim=dims, keepdim=True)
    plain = g * nonzero_prod / x.masked_fill(zero, 1)
    single = (g * nonzero_prod).where(zero, 0)  # scalar zeros fuse; zeros_like would be a fill run at once
    return (plain.where(zeros == 0, single.where(zeros == 1, 0)),)


def _extreme_vjp(ctx, g):
    # PyTorch's amax/amin: the gradient is shared evenly between tied extremes.
    x, = ctx.inputs
    dims = ctx.params["dims"]
    y = _restore(ctx.output, ctx)
    mask = (x == y).cast(g.dtype)
    return (_restore(g, ctx) * mask / mask.sum(dim=dims, keepdim=True),)


primitive("sum", infer=_reduce_infer("sum"), vjp=_sum_vjp, cost="compute", saves=saves_none)(_accumulate(np.add))
primitive("prod", infer=_reduce_infer("prod"), vjp=_prod_vjp, cost="compute")(_accumulate(np.multiply))
primitive("amax", infer=_reduce_infer("amax", True), vjp=_extreme_vjp, cost="compute")(_accumulate(np.maximum))
primitive("amin", infer=_reduce_infer("amin", True), vjp=_extreme_vjp, cost="compute")(_accumulate(np.minimum))


def _arg_infer(name: str):
    def infer(x: Aval, *, dim: int, keepdim: bool) -> Aval:
        if not x.shape:
            return Aval((), i64)
        if x.shape[dim] == 0:
            raise ShapeError(name, f"cannot take {name} over an empty dimension of shape {x.shape}")
        return Aval(_reduced_shape(x.shape, (dim,), keepdim), i64)

    return infer


def _arg_reference(fn):
    def run(x, *, dim, keepdim):
        if x.ndim == 0:
            return np.zeros((), np.int64)
        if is_half(x.dtype):
            x = x.astype(np.float32)
        out = fn(x, axis=dim, keepdims=keepdim)
        return np.asarray(out, dtype=np.int64)

    return run


primitive("argmax", infer=_arg_infer("argmax"), cost="compute")(_arg_reference(np.argmax))
primitive("argmin", infer=_arg_infer("argmin"), cost="compute")(_arg_reference(np.argmin))


# ---- scans ---------------------------------------------------------------------------------------

def _scan_infer(x: Aval, *, dim: int) -> Aval:
    return x


def _scan(fn):
    def run(x, *, dim):
        if x.ndim == 0:
            return x.copy()
        if is_half(x.dtype):
            return fn(x.astype(np.float32), axis=dim).astype(x.dtype)
        return fn(x, axis=dim, dtype=x.dtype)

    return run


def _cumsum_vjp(ctx, g):
    dim = ctx.params["dim"]
    if g.ndim == 0:
        return (g,)
    return (g.flip(dim).cumsum(dim).flip(dim),)


def _cumprod_vjp(ctx, g):
    dim = ctx.params["dim"]
    x, = ctx.inputs
    if g.ndim == 0:
        return (g,)
    if not bool((x == 0).any()):  # PyTorch's fast path: divide by x where it has no zeros
        return ((g * ctx.output).flip(dim).cumsum(dim).flip(dim) / x,)
    return (_cumprod_vjp_exact(x, g, dim),)


_positions: dict = {}  # n -> arange(n), kept per device


def _cumprod_vjp_exact(x, g, dim):
    """d out_j / d x_i = prod(x[:i]) * prod(x[i+1:j+1]) for j >= i, without dividing (zeros allowed).

    Builds an n x n matrix per row of `dim`: O(n^2) work, only taken when `x` holds a zero.
    """
    xm, gm = x.movedim(dim, -1), g.movedim(dim, -1)
    n = xm.shape[-1]
    positions = kept(_positions, (n,), lambda: np.arange(n, dtype=np.int64), x)
    i = positions.reshape(n, 1)
    j = positions.reshape(1, n)
    square = xm.unsqueeze(-2).expand(xm.shape[:-1] + (n, n))
    span = square.where(j > i, 1).cumprod(-1).masked_fill(j < i, 0)   # prod(x[i+1:j+1]), j >= i
    before = xm.cumprod(-1).narrow(-1, 0, n - 1).pad((1, 0), value=1.0)  # prod(x[:i])
    return (before * (span * gm.unsqueeze(-2)).sum(dim=-1)).movedim(-1, dim)


primitive("cumsum", infer=_scan_infer, vjp=_cumsum_vjp, cost="compute", saves=saves_none)(_scan(np.cumsum))
primitive("cumprod", infer=_scan_infer, vjp=_cumprod_vjp, cost="compute")(_scan(np.cumprod))


def _cumextreme_infer(x: Aval, *, dim: int, largest: bool) -> Aval:
    return Aval(x.shape, i64)


def _cumextreme_reference(x, *, dim, largest):
    if x.ndim == 0:
        return np.zeros((), np.int64)
    if is_half(x.dtype):
        x = x.astype(np.float32)
    running = (np.maximum if largest else np.minimum).accumulate(x, axis=dim)
    # PyTorch reports the last position at which the running extreme was reached; a NaN is an extreme
    # that sticks (the running value stays NaN), so its position is reported until the next NaN.
    positions = np.arange(x.shape[dim]).reshape([-1 if i == dim else 1 for i in range(x.ndim)])
    reached = x == running
    if x.dtype.kind == "f":
        reached |= np.isnan(x)
    hit = np.where(reached, positions, 0)
    return np.maximum.accumulate(hit, axis=dim).astype(np.int64)


primitive("cumextreme_index", infer=_cumextreme_infer, cost="compute")(_cumextreme_reference)


def _argsort_infer(x: Aval, *, dim: int, descending: bool) -> Aval:
    return Aval(x.shape, i64)


def _argsort_reference(x, *, dim, descending):
    if x.ndim == 0:
        return np.zeros((), np.int64)
    if is_half(x.dtype):
        x = x.astype(np.float32)
    if descending:
        # Ties keep ascending index order: sort ascending on an order-reversing key.
        if x.dtype == np.bool_:
            x = ~x
        elif x.dtype.kind == "u":
            x = -(x.astype(np.int64))
        elif x.dtype.kind == "i":
            x = ~x
        else:
            # NaN counts as the largest value, as in PyTorch: first when descending (-NaN would sort last).
            return np.lexsort((-x, ~np.isnan(x)), axis=dim).astype(np.int64)
    return np.argsort(x, axis=dim, kind="stable").astype(np.int64)


primitive("argsort", infer=_argsort_infer, cost="compute")(_argsort_reference)
