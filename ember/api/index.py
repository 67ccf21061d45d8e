"""Indexing: Python subscripts (ints, slices with steps, `...`, `None`, integer and bool tensors),
functional assignment, and the gather/scatter family.

Subscripts follow NumPy and PyTorch exactly, including the placement of dims for several integer-array
indices. `x.slice_assign(idx, v)` returns a new tensor; `x[idx] = v` rebinds `x` to that tensor (it is
recorded by autodiff like any op). `ember.s[...]` builds an index as a value to pass around.

Example:
    >>> x = ember.arange(12).reshape(3, 4)
    >>> x[1:, ::-2].tolist(), x[[0, 2], 1].tolist()
    ([[7, 5], [11, 9]], [1, 9])
    >>> x[ember.s[0, :2]] = 0
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..dtype import bool_, i64
from ..errors import ShapeError
from ..ops.primitive import broadcast_shapes, normalize_dim
from ._common import Tensor, apply, to_tensor_like
from .creation import arange, from_numpy, tensor


class IndexBuilder:
    """`ember.s[...]` returns the subscript itself, so an index can be built once and reused."""

    def __getitem__(self, index):
        return index


s = IndexBuilder()


def _as_index_tensor(item, device) -> Tensor:
    t = item if isinstance(item, Tensor) else tensor(np.asarray(item), device=device)
    if t.dtype.is_inexact:
        raise IndexError(f"tensors used as indices must be integer or bool, got {t.dtype}")
    return t.to(device.inner) if t.device.inner is not device.inner else t


def _normalize(x: Tensor, index) -> tuple[list, int]:
    """Expand `...`, turn sequences into index tensors, check the count; return items and dims used."""
    items = list(index) if isinstance(index, tuple) else [index]
    items = [_as_index_tensor(i, x.device) if isinstance(i, (list, np.ndarray, Tensor)) else i for i in items]
    used = 0
    for i in items:
        if i is None or i is Ellipsis:
            continue
        used += i.ndim if isinstance(i, Tensor) and i.dtype.is_bool else 1
        if not isinstance(i, (int, slice, Tensor, np.integer)) or isinstance(i, bool):
            raise IndexError(f"unsupported index {i!r}: use ints, slices, None, ..., or integer/bool tensors")
    if sum(i is Ellipsis for i in items) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if used > x.ndim:
        raise IndexError(f"too many indices for a tensor of {x.ndim} dims (shape {x.shape}): {used} given")
    if any(i is Ellipsis for i in items):
        k = next(n for n, i in enumerate(items) if i is Ellipsis)
        items[k:k + 1] = [slice(None)] * (x.ndim - used)
    else:
        items += [slice(None)] * (x.ndim - used)
    return items, used


def _int_index(i: int, dim: int, size: int) -> int:
    if not -size <= i < size:
        raise IndexError(f"index {i} is out of bounds for dim {dim} with size {size}")
    return i % size


def _slice_range(sl: slice, size: int) -> tuple[tuple[int, int, int], bool]:
    """A positive-step range covering the slice, and whether the result must be flipped."""
    start, stop, step = sl.indices(size)
    if step > 0:
        return (start, max(start, stop), step), False
    count = len(range(start, stop, step))
    if count == 0:
        return (0, 0, 1), False
    low = start + (count - 1) * step
    return (low, start + 1, -step), True


def getitem(x: Tensor, index) -> Tensor:
    """`x[index]` (see the module docs)."""
    items, _ = _normalize(x, index)
    if not any(isinstance(i, Tensor) for i in items):
        return _basic(x, items)
    return _advanced(x, items)


class _BasicIndex(NamedTuple):
    """A subscript of ints, slices and None as primitive params: one positive-step range per dim,
    the dims to flip (negative steps), the shape of the sliced block, and the shape `x[index]` has."""

    ranges: list
    flips: list
    sliced: tuple
    result: tuple


def _plan_basic(x: Tensor, items: list) -> _BasicIndex:
    ranges, flips, sliced, result, dim = [], [], [], [], 0
    for item in items:
        if item is None:
            result.append(1)
            continue
        size = x.shape[dim]
        if isinstance(item, slice):
            rng, flipped = _slice_range(item, size)
            result.append(len(range(*rng)))
            if flipped:
                flips.append(dim)
        else:
            i = _int_index(int(item), dim, size)
            rng = (i, i + 1, 1)
        ranges.append(rng)
        sliced.append(len(range(*rng)))
        dim += 1
    return _BasicIndex(ranges, flips, tuple(sliced), tuple(result))


def _basic(x: Tensor, items: list) -> Tensor:
    plan = _plan_basic(x, items)
    y = x._slice_ranges(plan.ranges)
    if plan.flips:
        y = y.flip(*plan.flips)
    return y.reshape(plan.result)


def _advanced(x: Tensor, items: list) -> Tensor:
    # None becomes a unit dim of x, so every remaining item applies to exactly one dim.
    expanded, dim = [], 0
    for item in items:
        if item is None:
            x = x.unsqueeze(dim)
            expanded.append(slice(None))
            dim += 1
        elif isinstance(item, Tensor) and item.dtype.is_bool and item.ndim == 0:
            # A 0-d mask adds a dim of size 1 (true) or 0 (false), as in NumPy and PyTorch.
            x = x.unsqueeze(dim)
            expanded.append(nonzero(item.reshape(1), as_tuple=True)[0])
            dim += 1
        elif isinstance(item, Tensor) and item.dtype.is_bool:
            if item.shape != x.shape[dim:dim + item.ndim]:
                raise IndexError(f"boolean mask of shape {item.shape} does not match dims {dim}.."
                                 f"{dim + item.ndim - 1} of shape {x.shape}")
            expanded.extend(nonzero(item, as_tuple=True))
            dim += item.ndim
        else:
            expanded.append(item)
            dim += 1
    basic = [i if isinstance(i, slice) else slice(None) for i in expanded]
    y = _basic(x, basic)
    advanced = [(d, i) for d, i in enumerate(expanded) if not isinstance(i, slice)]
    dims = [d for d, _ in advanced]
    indices = [i if isinstance(i, Tensor) else tensor(int(i), device=x.device.inner) for _, i in advanced]
    indices = [_bounded(t.cast(i64), d, y.shape[d]) for (d, _), t in zip(advanced, indices)]
    batch = broadcast_shapes("index", *(t.shape for t in indices))
    rest = [d for d in range(y.ndim) if d not in dims]
    moved = y.permute(dims + rest)
    sizes = [y.shape[d] for d in dims]
    linear = None
    for t, stride in zip(indices, _strides(sizes)):
        term = t.expand(batch) * stride
        linear = term if linear is None else linear + term
    flat = moved.reshape((math.prod(sizes),) + moved.shape[len(dims):])
    out = flat.index_select(0, linear.reshape(-1).to(flat.device)).reshape(batch + moved.shape[len(dims):])
    consecutive = dims == list(range(dims[0], dims[0] + len(dims)))
    if consecutive and dims[0] > 0:
        nb = len(batch)
        order = list(range(nb, nb + dims[0])) + list(range(nb)) + list(range(nb + dims[0], out.ndim))
        out = out.permute(order)
    return out


def _strides(sizes: list[int]) -> list[int]:
    strides, acc = [], 1
    for n in reversed(sizes):
        strides.append(acc)
        acc *= n
    return strides[::-1]


def _bounded(index: Tensor, dim: int, size: int) -> Tensor:
    """`index` checked against `size` (on the host: indices are data) with negatives wrapped."""
    host = index.numpy()
    if host.size == 0:
        return index
    low, high = host.min(), host.max()
    if low < -size or high >= size:
        bad = low if low < -size else high
        raise IndexError(f"index {bad} is out of bounds for dim {dim} with size {size}")
    return index + (index < 0).cast(i64) * size if low < 0 else index


def slice_assign(x: Tensor, index, value) -> Tensor:
    """A new tensor: `x` with `value` (broadcast) written at `index`.

    Example:
        >>> ember.zeros(3).slice_assign(ember.s[1:], 5.0).tolist()
        [0.0, 5.0, 5.0]
    """
    items, _ = _normalize(x, index)
    value = to_tensor_like(value, x, x.dtype) if not isinstance(value, Tensor) else value.cast(x.dtype)
    if any(isinstance(i, Tensor) for i in items):
        positions = _positions(x, items)
        value = _broadcast_value(value, positions.shape)
        flat = x.reshape(-1)
        return flat.scatter(0, positions.reshape(-1), value.reshape(-1)).reshape(x.shape)
    plan = _plan_basic(x, items)
    value = _broadcast_value(value, plan.result).reshape(plan.sliced)
    if plan.flips:
        value = value.flip(*plan.flips)
    return x._slice_assign_ranges(plan.ranges, value)


def _positions(x: Tensor, items: list) -> Tensor:
    """The flat positions in `x` that the normalized index `items` selects, in `x[items]`'s shape."""
    return getitem(arange(x.numel, device=x.device.inner).reshape(x.shape), tuple(items))


def _broadcast_value(value: Tensor, shape: tuple) -> Tensor:
    try:
        return value.expand(shape)
    except ShapeError:
        raise ShapeError("slice_assign", f"value of shape {value.shape} does not broadcast to the "
                                         f"indexed shape {shape}") from None


def setitem(x: Tensor, index, value) -> None:
    """`x[index] = value`: rebinds `x` to `x.slice_assign(index, value)`."""
    _check_rebind(x)
    out = slice_assign(x, index, value)
    x._device, x._handle, x._aval = out._device, out._handle, out._aval


def _check_rebind(x: Tensor) -> None:
    node = getattr(x._handle, "node", None)
    if node is not None and node.prim is None:
        # Rebinding a leaf would leave its gradient unreachable (x.grad(...) would silently be None).
        raise RuntimeError("cannot assign into a leaf tensor that requires grad: assign into a copy "
                           "(y = x * 1; y[...] = v) or before require_grad(), as in PyTorch")


def scatter(x: Tensor, dim: int, index: Tensor, src) -> Tensor:
    """`x` with `src` (a tensor or scalar) written along `dim` at `index`.

    Example:
        >>> ember.zeros(3).scatter(0, ember.tensor([2]), ember.tensor([7.0])).tolist()
        [0.0, 0.0, 7.0]
    """
    dim = normalize_dim("scatter", dim, x.ndim)
    if not isinstance(src, Tensor):
        src = to_tensor_like(src, x, x.dtype).expand(index.shape)
    return apply("scatter", x, index, src.cast(x.dtype), dim=dim, reduce=None)


def scatter_add(x: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """`x` plus `src` summed along `dim` into positions `index` (repeated indices add up)."""
    dim = normalize_dim("scatter_add", dim, x.ndim)
    return apply("scatter", x, index, src.cast(x.dtype), dim=dim, reduce="add")


def index_select(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """The slices of `x` along `dim` at the positions in the 1-d `index`."""
    return apply("index_select", x, index, dim=normalize_dim("index_select", dim, x.ndim))


def index_add(x: Tensor, dim: int, index: Tensor, source: Tensor, alpha: float = 1) -> Tensor:
    """`x` with `alpha * source` added to the slices along `dim` at `index` (repeats add up)."""
    if alpha != 1:
        source = source * alpha
    return apply("index_add", x, index, source.cast(x.dtype), dim=normalize_dim("index_add", dim, x.ndim))


def masked_select(x: Tensor, mask: Tensor) -> Tensor:
    """The elements of `x` where `mask` (broadcast with `x`) holds, as a 1-d tensor."""
    shape = broadcast_shapes("masked_select", x.shape, mask.shape)
    return x.expand(shape).reshape(-1)[mask.cast(bool_).expand(shape).reshape(-1)]


def take(x: Tensor, index: Tensor) -> Tensor:
    """Elements of the flattened `x` at `index`, in the shape of `index`."""
    flat = x.reshape(-1)
    return flat[index.reshape(-1)].reshape(index.shape)


def one_hot(x: Tensor, num_classes: int = -1) -> Tensor:
    """Class indices as one-hot i64 vectors in a new last dim (`num_classes=-1`: max + 1).

    Example:
        >>> ember.one_hot(ember.tensor([0, 2]), 3).tolist()
        [[1, 0, 0], [0, 0, 1]]
    """
    if not x.dtype.is_int:
        raise TypeError(f"one_hot expects an integer tensor, got {x.dtype}")
    if num_classes < 0:
        num_classes = int(x.max().item()) + 1 if x.numel else 0
    elif x.numel:  # out-of-range labels would silently give all-zero rows
        low, high = int(x.min().item()), int(x.max().item())
        if low < 0 or high >= num_classes:
            raise IndexError(f"one_hot: class {low if low < 0 else high} is out of range for {num_classes} classes")
    return (x.unsqueeze(-1) == arange(num_classes, device=x.device)).cast(i64)


def nonzero(x: Tensor, as_tuple: bool = False):
    """Indices of nonzero elements: an (n, ndim) i64 tensor, or one 1-d tensor per dim.

    This reads the data on the host (the output size depends on it).
    """
    found = np.argwhere(x.numpy() != 0).astype(np.int64)
    device = x.device.inner
    if as_tuple:
        return tuple(from_numpy(np.ascontiguousarray(found[:, d]), device) for d in range(max(x.ndim, 1)))
    return from_numpy(found, device)


METHODS = {
    "__getitem__": getitem, "__setitem__": setitem, "slice_assign": slice_assign, "scatter": scatter,
    "scatter_add": scatter_add, "index_select": index_select, "index_add": index_add,
    "masked_select": masked_select, "take": take, "nonzero": nonzero,
}


def scatter_reduce(x: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *,
                   include_self: bool = True) -> Tensor:
    """`x` with the values of `src` reduced along `dim` into positions `index` by `reduce` ("sum",
    "prod", "mean", "amax" or "amin"), starting from `x`'s values (`include_self=True`) or from the
    values of `src` alone; positions no index names keep `x`. Integer "mean" rounds down, as PyTorch.

    Example:
        >>> x = ember.zeros(2)
        >>> x.scatter_reduce(0, ember.tensor([1, 1]), ember.tensor([3.0, 5.0]), "amax").tolist()
        [0.0, 5.0]
    """
    dim = normalize_dim("scatter_reduce", dim, x.ndim)
    return apply("scatter_reduce", x, index, src.cast(x.dtype), dim=dim, reduce=reduce,
                 include_self=bool(include_self))


def index_put(x: Tensor, indices, values, accumulate: bool = False) -> Tensor:
    """A new tensor: `x` with `values` (broadcast) written at `x[indices]`, `indices` a tuple of index
    tensors (integer or bool) as in `x[indices]`; `accumulate=True` adds them instead, repeated
    positions adding up (without it, which of repeated writes wins is unspecified, as in PyTorch).

    Example:
        >>> i = (ember.tensor([0, 0, 2]),)
        >>> ember.zeros(3).index_put(i, ember.tensor(1.0), accumulate=True).tolist()
        [2.0, 0.0, 1.0]
    """
    if not accumulate:
        return slice_assign(x, tuple(indices), values)
    positions = _positions(x, _normalize(x, tuple(indices))[0])
    values = to_tensor_like(values, x, x.dtype) if not isinstance(values, Tensor) else values.cast(x.dtype)
    values = _broadcast_value(values, positions.shape)
    return x.reshape(-1).scatter_add(0, positions.reshape(-1), values.reshape(-1)).reshape(x.shape)


def index_put_(x: Tensor, indices, values, accumulate: bool = False) -> Tensor:
    """`index_put` that rebinds `x` to its result (as `x[indices] = values` does) and returns `x`."""
    _check_rebind(x)
    out = index_put(x, indices, values, accumulate)
    x._device, x._handle, x._aval = out._device, out._handle, out._aval
    return x


METHODS.update({"scatter_reduce": scatter_reduce, "index_put": index_put, "index_put_": index_put_})
