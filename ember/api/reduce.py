"""Reductions over `dim` (an int, a tuple, or None for all) with `keepdim`, scans, sorting and selection.

`max`/`min` with a `dim` return `(values, indices)` like PyTorch; without one they return the extreme
value. Sums and products of int and bool tensors are i64, as in PyTorch. `mean` of an integer tensor
gives the default float (PyTorch refuses; ember follows NumPy here).

Example:
    >>> x = ember.tensor([[1.0, 5.0], [3.0, 2.0]])
    >>> x.sum(dim=0).tolist(), x.max(dim=1).indices.tolist()
    ([4.0, 7.0], [1, 0])
"""

from __future__ import annotations

import math
from typing import NamedTuple

from ..dtype import default_float, i64
from ..errors import ShapeError
from ..ops.primitive import normalize_dim, normalize_dims
from .. import amp
from ._common import Tensor, apply


class ValuesIndices(NamedTuple):
    """A pair of tensors, as PyTorch returns from max(dim), sort, topk and friends."""

    values: Tensor
    indices: Tensor


def _dims(op: str, x: Tensor, dim) -> tuple[int, ...]:
    return normalize_dims(op, dim, x.ndim)


@amp.float32
def sum(x: Tensor, dim=None, keepdim: bool = False, dtype=None) -> Tensor:  # noqa: A001
    """The sum over `dim`. Example: `x.sum(dim=(0, 1), keepdim=True)`."""
    if dtype is not None:
        x = x.cast(dtype)
    elif not x.dtype.is_inexact:
        x = x.cast(i64)
    return apply("sum", x, dims=_dims("sum", x, dim), keepdim=keepdim)


@amp.float32
def prod(x: Tensor, dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    """The product over `dim`."""
    if dtype is not None:
        x = x.cast(dtype)
    elif not x.dtype.is_inexact:
        x = x.cast(i64)
    return apply("prod", x, dims=_dims("prod", x, dim), keepdim=keepdim)


def _half(x: Tensor) -> bool:
    """f16/bf16: reductions that divide or square accumulate in f32 and round once, as PyTorch does
    (an f16 sum of squares overflows long before the variance does)."""
    return x.dtype.name in ("f16", "bf16")


def mean(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """The mean over `dim` (NaN over empty dims, like PyTorch)."""
    if not x.dtype.is_inexact:
        x = x.cast(default_float())
    if _half(x):
        return mean(x.cast("f32"), dim, keepdim).cast(x.dtype)
    dims = _dims("mean", x, dim)
    count = math.prod(x.shape[d] for d in dims)
    return apply("sum", x, dims=dims, keepdim=keepdim) / (count if count else float("nan"))


def amax(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """The largest value over `dim` (the gradient is shared between ties)."""
    return apply("amax", x, dims=_dims("amax", x, dim), keepdim=keepdim)


def amin(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """The smallest value over `dim` (the gradient is shared between ties)."""
    return apply("amin", x, dims=_dims("amin", x, dim), keepdim=keepdim)


def _extreme(name: str, arg):
    def op(x: Tensor, dim: int | None = None, keepdim: bool = False):
        if dim is None:
            return apply(name, x, dims=_dims(name, x, None), keepdim=False)
        if not isinstance(dim, int):
            raise TypeError(f"{name[1:]}(dim=...) takes one int dim; use a{name[1:]} for several")
        _dims(name[1:], x, dim)  # a bad dim is named by max/min, not by the argmax inside
        indices = arg(x, dim, keepdim=True)
        values = gather(x, dim, indices) if x.ndim else x
        if not keepdim and x.ndim:
            values, indices = values.squeeze(dim), indices.squeeze(dim)
        return ValuesIndices(values, indices)

    return op


def argmax(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """The index of the largest value along `dim` (of the flattened tensor when `dim` is None)."""
    if dim is None:
        out = apply("argmax", x.reshape(-1), dim=0, keepdim=False)
        return out.reshape((1,) * x.ndim) if keepdim else out
    return apply("argmax", x, dim=normalize_dim("argmax", dim, x.ndim), keepdim=keepdim)


def argmin(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """The index of the smallest value along `dim` (of the flattened tensor when `dim` is None)."""
    if dim is None:
        out = apply("argmin", x.reshape(-1), dim=0, keepdim=False)
        return out.reshape((1,) * x.ndim) if keepdim else out
    return apply("argmin", x, dim=normalize_dim("argmin", dim, x.ndim), keepdim=keepdim)


max = _extreme("amax", argmax)  # noqa: A001
min = _extreme("amin", argmin)  # noqa: A001
max.__doc__ = "The maximum: of all elements, or `(values, indices)` along `dim`.\n\nExample:\n    >>> x.max(dim=1)"
min.__doc__ = "The minimum: of all elements, or `(values, indices)` along `dim`.\n\nExample:\n    >>> x.min(dim=1)"


def var(x: Tensor, dim=None, correction: int = 1, keepdim: bool = False) -> Tensor:
    """The variance over `dim` with Bessel's `correction` (1: sample variance, 0: population).

    Example:
        >>> ember.tensor([1.0, 2.0, 3.0, 4.0]).var().item()
        1.666...
    """
    if not x.dtype.is_float:
        x = x.cast(default_float())
    if _half(x):
        return var(x.cast("f32"), dim, correction, keepdim).cast(x.dtype)
    dims = _dims("var", x, dim)
    count = math.prod(x.shape[d] for d in dims)
    centered = x - mean(x, dims, keepdim=True)
    total = apply("sum", centered * centered, dims=dims, keepdim=keepdim)
    return total / (count - correction) if count - correction > 0 else total / float("nan")


def std(x: Tensor, dim=None, correction: int = 1, keepdim: bool = False) -> Tensor:
    """The standard deviation over `dim` (see `var`); its gradient is 0 where it is 0, as in PyTorch."""
    v = var(x, dim, correction, keepdim)
    zero = v == 0
    return v.masked_fill(zero, 1).sqrt().masked_fill(zero, 0)  # sqrt'(0) is inf: keep it out of the graph


@amp.float32
def logsumexp(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """`log(sum(exp(x)))` over `dim`, computed stably by shifting by the (constant) maximum."""
    if not x.dtype.is_float:
        x = x.cast(default_float())
    dims = _dims("logsumexp", x, dim)
    if x.numel == 0:
        return apply("sum", x.exp(), dims=dims, keepdim=keepdim).log()
    shift = amax(x, dims, keepdim=True).detach()
    shift = shift.masked_fill(shift.isinf(), 0)
    out = (x - shift).exp().sum(dim=dims, keepdim=True).log() + shift
    return out if keepdim else out.reshape(tuple(n for i, n in enumerate(x.shape) if i not in dims))


@amp.float32
def norm(x: Tensor, p: float = 2, dim=None, keepdim: bool = False) -> Tensor:
    """The vector p-norm over `dim` (`p` may be inf or -inf; p=2 by default).

    Example:
        >>> ember.tensor([3.0, 4.0]).norm().item()
        5.0
    """
    if x.dtype.is_complex:  # the norm of the magnitudes (torch's), a real tensor
        return norm(x.abs(), p, dim, keepdim)
    if not x.dtype.is_float:
        x = x.cast(default_float())
    if _half(x):
        return norm(x.cast("f32"), p, dim, keepdim).cast(x.dtype)
    a = x.abs()
    if p == float("inf"):
        return amax(a, dim, keepdim)
    if p == float("-inf"):
        return amin(a, dim, keepdim)
    if p == 0:
        return (a != 0).cast(x.dtype).sum(dim=dim, keepdim=keepdim)
    if p == 1:
        return a.sum(dim=dim, keepdim=keepdim)
    if p == 2:
        return _root_of_sum((x * x).sum(dim=dim, keepdim=keepdim), p)
    if 0 < p < 1:  # |x|^p has an infinite slope at 0: take PyTorch's subgradient 0 there
        zero = a == 0
        return _root_of_sum((a.masked_fill(zero, 1.0) ** p).masked_fill(zero, 0.0).sum(dim=dim, keepdim=keepdim), p)
    return _root_of_sum((a ** p).sum(dim=dim, keepdim=keepdim), p)


def _root_of_sum(total: Tensor, p: float) -> Tensor:
    """`total ** (1/p)` with a zero gradient where `total` is 0: the root's infinite slope there would
    meet the zero slope of `|x|^p` and give NaN; PyTorch's norm takes the subgradient 0 at the origin."""
    zero = total == 0
    safe = total.masked_fill(zero, 1.0)
    root = safe.sqrt() if p == 2 else safe ** (1.0 / p)
    return root.masked_fill(zero, 0.0)


def all(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A001
    """True where every element over `dim` is nonzero."""
    return (x == 0).sum(dim=dim, keepdim=keepdim) == 0


def any(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A001
    """True where some element over `dim` is nonzero."""
    return (x != 0).sum(dim=dim, keepdim=keepdim) > 0


# ---- scans -----------------------------------------------------------------------------------------

@amp.float32
def cumsum(x: Tensor, dim: int) -> Tensor:
    """Running sums along `dim` (ints and bools accumulate in i64)."""
    if not x.dtype.is_inexact:
        x = x.cast(i64)
    return apply("cumsum", x, dim=normalize_dim("cumsum", dim, x.ndim))


@amp.float32
def cumprod(x: Tensor, dim: int) -> Tensor:
    """Running products along `dim`."""
    if not x.dtype.is_inexact:
        x = x.cast(i64)
    return apply("cumprod", x, dim=normalize_dim("cumprod", dim, x.ndim))


def _cumextreme(largest: bool):
    def op(x: Tensor, dim: int) -> ValuesIndices:
        dim = normalize_dim("cummax" if largest else "cummin", dim, x.ndim)
        indices = apply("cumextreme_index", x, dim=dim, largest=largest)
        return ValuesIndices(gather(x, dim, indices) if x.ndim else x, indices)

    return op


cummax = _cumextreme(True)
cummin = _cumextreme(False)
cummax.__doc__ = "Running maximum along `dim`, as `(values, indices)`."
cummin.__doc__ = "Running minimum along `dim`, as `(values, indices)`."


# ---- sorting and selection -------------------------------------------------------------------------

def argsort(x: Tensor, dim: int = -1, descending: bool = False) -> Tensor:
    """The indices that sort `x` along `dim` (stable: ties keep their order)."""
    return apply("argsort", x, dim=normalize_dim("argsort", dim, x.ndim), descending=descending)


def sort(x: Tensor, dim: int = -1, descending: bool = False) -> ValuesIndices:
    """`x` sorted along `dim`, with the indices, as `(values, indices)`.

    Example:
        >>> ember.tensor([3, 1, 2]).sort().values.tolist()
        [1, 2, 3]
    """
    indices = argsort(x, dim, descending)
    return ValuesIndices(gather(x, dim, indices) if x.ndim else x, indices)


def topk(x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> ValuesIndices:  # noqa: A002
    """The `k` largest (or smallest) values along `dim`, in order, with their indices."""
    dim = normalize_dim("topk", dim, x.ndim)
    size = x.shape[dim] if x.ndim else 1
    if not 0 <= k <= size:
        raise ShapeError("topk", f"k={k} is out of range for dim {dim} of size {size} (shape {x.shape})")
    indices = argsort(x, dim, descending=largest)
    if x.ndim:
        indices = indices.narrow(dim, 0, k)
    return ValuesIndices(gather(x, dim, indices) if x.ndim else x, indices)


def median(x: Tensor, dim: int | None = None, keepdim: bool = False):
    """The lower median: of all elements, or `(values, indices)` along `dim` (PyTorch's convention)."""
    if dim is None:
        flat = x.reshape(-1)
        if flat.numel == 0:
            raise ShapeError("median", "cannot take the median of an empty tensor")
        value = median(flat, 0).values.detach()
        # PyTorch shares the gradient of the overall median evenly between the elements equal to it;
        # the added term is exactly zero, so the value stays the median.
        ties = (flat == value) | (flat.isnan() & value.isnan()) if flat.dtype.is_float else flat == value
        if not flat.dtype.is_float:
            return value
        return value + ((flat - value).masked_fill(~ties, 0)).sum() / ties.sum()
    dim = normalize_dim("median", dim, x.ndim)
    if not x.ndim:
        return ValuesIndices(x, x.new_zeros().cast(i64))
    n = x.shape[dim]
    order = argsort(x, dim)  # NaNs sort last, in index order
    if x.dtype.is_float:
        # PyTorch propagates NaN: a slice holding NaNs answers with its first NaN.
        nans = x.isnan().sum(dim=dim, keepdim=True)
        position = (n - nans).where(nans > 0, (n - 1) // 2)
        pick = order.gather(dim, position)
    else:
        pick = order.narrow(dim, (n - 1) // 2, 1)
    values = gather(x, dim, pick)
    if not keepdim:
        values, pick = values.squeeze(dim), pick.squeeze(dim)
    return ValuesIndices(values, pick)


def gather(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """Values of `x` picked along `dim` by `index` (which has the rank of `x`).

    Example:
        >>> ember.tensor([[1, 2], [3, 4]]).gather(1, ember.tensor([[1], [0]])).tolist()
        [[2], [3]]
    """
    return apply("gather", x, index, dim=normalize_dim("gather", dim, x.ndim))


METHODS = {
    "sum": sum, "prod": prod, "mean": mean, "amax": amax, "amin": amin, "max": max, "min": min,
    "argmax": argmax, "argmin": argmin, "var": var, "std": std, "logsumexp": logsumexp, "norm": norm,
    "all": all, "any": any, "cumsum": cumsum, "cumprod": cumprod, "cummax": cummax, "cummin": cummin,
    "argsort": argsort, "sort": sort, "topk": topk, "median": median, "gather": gather,
}
