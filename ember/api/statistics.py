"""Counting and searching: `unique`, `unique_consecutive`, `bincount`, `histc`, `searchsorted`,
`bucketize`, with PyTorch's names, signatures and results.

`unique`, `unique_consecutive` and `bincount` read the data on the host, as `nonzero` does: the size
of their output depends on it. `bincount` and `histc` then add up on the device (a scatter-add);
`searchsorted` is a primitive, `bucketize` is `searchsorted` with the arguments swapped.

Example:
    >>> [t.tolist() for t in ember.unique(ember.tensor([3, 1, 3]), return_counts=True)]
    [[1, 3], [1, 2]]
    >>> ember.bucketize(ember.tensor([0.5, 2.0]), ember.tensor([1.0, 2.0])).tolist()
    [0, 1]
"""

from __future__ import annotations

import math

import numpy as np

from ..dtype import f32, f64, i64
from ..errors import DTypeError, ShapeError
from ..ops.primitive import normalize_dim
from ._common import Tensor, apply, result_type
from .creation import from_numpy, tensor, zeros


def _to_device(array: np.ndarray, like: Tensor) -> Tensor:
    return from_numpy(np.array(array, order="C"), like.device.inner)  # 0-d stays 0-d


def _host(x: Tensor) -> np.ndarray:
    """`x` on the host; half floats as f32 (NumPy sorts those exactly there)."""
    array = np.asarray(x.numpy())
    return array.astype(np.float32) if x.dtype.is_float and x.dtype.itemsize == 2 else array


def unique(x: Tensor, sorted: bool = True, return_inverse: bool = False,  # noqa: A002
           return_counts: bool = False, dim: int | None = None):
    """The distinct values of `x` (or, with `dim`, its distinct slices along `dim`) in ascending order;
    with `return_inverse` also where each element (slice) of `x` went, with `return_counts` how
    often each value occurs. NaNs are distinct from each other, as in PyTorch. `sorted=False`
    returns them sorted too (PyTorch leaves that order unspecified). Returns a tensor, or a tuple
    when an extra output is asked for.

    Example:
        >>> ember.unique(ember.tensor([2, 0, 2]), return_inverse=True)[1].tolist()
        [1, 0, 1]
    """
    host = _host(x)
    if dim is not None:
        dim = normalize_dim("unique", dim, x.ndim)
        if x.ndim == 0:
            dim = None
    if dim is None:
        values, inverse, counts = np.unique(host.reshape(-1), return_inverse=True, return_counts=True,
                                            equal_nan=False)
        inverse = inverse.reshape(x.shape)
    else:
        values, inverse, counts = np.unique(host, return_inverse=True, return_counts=True, axis=dim,
                                            equal_nan=False)
        inverse = inverse.reshape(-1)
    return _outputs(values.astype(x.dtype.np), inverse, counts, x, return_inverse, return_counts)


def unique_consecutive(x: Tensor, return_inverse: bool = False, return_counts: bool = False,
                       dim: int | None = None):
    """`x` with each run of equal consecutive values (slices along `dim`) collapsed to one, with
    optional inverse indices and run lengths, as `unique` returns them.

    Example:
        >>> ember.unique_consecutive(ember.tensor([1, 1, 2, 1])).tolist()
        [1, 2, 1]
    """
    host = _host(x)
    if dim is None or x.ndim == 0:
        host, shape, dim = host.reshape(-1), x.shape, 0
    else:
        dim = normalize_dim("unique_consecutive", dim, x.ndim)
        shape = (x.shape[dim],)
    moved = np.moveaxis(host, dim, 0)
    n = moved.shape[0]
    change = np.ones(n, bool)
    if n > 1:
        change[1:] = (moved[1:] != moved[:-1]).reshape(n - 1, -1).any(axis=1)
    starts = np.flatnonzero(change)
    values = np.moveaxis(moved[starts], 0, dim).astype(x.dtype.np)
    inverse = (np.cumsum(change) - 1).reshape(shape)
    counts = np.diff(np.append(starts, n))
    return _outputs(values, inverse, counts, x, return_inverse, return_counts)


def _outputs(values, inverse, counts, x: Tensor, return_inverse: bool, return_counts: bool):
    out = [_to_device(values, x)]
    if return_inverse:
        out.append(_to_device(inverse.astype(np.int64), x))
    if return_counts:
        out.append(_to_device(counts.astype(np.int64), x))
    return out[0] if len(out) == 1 else tuple(out)


def bincount(x: Tensor, weights: Tensor | None = None, minlength: int = 0) -> Tensor:
    """How often each value 0, 1, ..., max(x) occurs in the 1-d non-negative integer `x` (at least
    `minlength` bins); with `weights` (the shape of `x`), the sum of the weights per value. The
    result is i64 without weights, the weights' dtype for f32 and f64 weights, f64 for others (PyTorch's).

    Example:
        >>> ember.bincount(ember.tensor([0, 2, 2])).tolist()
        [1, 0, 2]
    """
    if not x.dtype.is_int or x.ndim != 1:
        raise DTypeError(f"bincount expects a 1-d integer tensor, got {x.ndim}-d {x.dtype}")
    if minlength < 0:
        raise ValueError(f"bincount: minlength must be non-negative, got {minlength}")
    if weights is not None and weights.shape != x.shape:
        raise ShapeError("bincount", f"weights of shape {weights.shape} do not match input of shape {x.shape}")
    host = np.asarray(x.numpy())
    if host.size and host.min() < 0:
        raise ValueError(f"bincount: values must be non-negative, got {host.min()}")
    length = max(int(host.max()) + 1 if host.size else 0, minlength)
    if weights is None:
        source, dtype = x.new_full(x.shape, 1).cast(i64), i64
    else:
        dtype = weights.dtype if weights.dtype in (f32, f64) else f64
        source = weights.cast(dtype)
    return zeros(length, dtype=dtype, device=x.device).scatter_add(0, x.cast(i64), source)


def histc(x: Tensor, bins: int = 100, min: float = 0, max: float = 0) -> Tensor:  # noqa: A002
    """A histogram of the float `x`: `bins` equal-width bins over [min, max] (both 0: the data's
    min and max), values outside left out, `max` itself in the last bin; in the dtype of `x`.

    Example:
        >>> ember.histc(ember.tensor([1.0, 2.0, 1.0]), bins=4, min=0, max=3).tolist()
        [0.0, 2.0, 1.0, 0.0]
    """
    if not x.dtype.is_float:
        raise DTypeError(f"histc expects a float tensor, got {x.dtype}")
    if bins <= 0:
        raise ValueError(f"histc: bins must be positive, got {bins}")
    if min > max:
        raise ValueError(f"histc: max ({max}) must not be below min ({min})")
    low, high = float(min), float(max)
    if low == high and x.numel:
        low, high = float(x.amin().item()), float(x.amax().item())
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"histc: the range [{low}, {high}] is not finite")
    if low == high:
        low, high = low - 1, high + 1
    flat = x.detach().reshape(-1).cast(f64)  # counts have no gradient (PyTorch defines none)
    inside = (flat >= low) & (flat <= high)
    position = ((flat - low) * (bins / (high - low))).floor().clamp(0, bins - 1)
    counts = zeros(bins, dtype=f64, device=x.device)
    return counts.scatter_add(0, position.cast(i64), inside.cast(f64)).cast(x.dtype)


def searchsorted(sorted_sequence: Tensor, values, *, out_int32: bool = False, right: bool = False,
                 side: str | None = None, sorter: Tensor | None = None) -> Tensor:
    """For each of `values`, the index in the last dim of `sorted_sequence` where it would be inserted
    to keep it sorted: before equal entries (`right=False`, `side="left"`) or after them. The
    sequence is 1-d, or has the leading dims of `values`; `sorter` gives the order that sorts an
    unsorted sequence (`argsort`'s result). Values may be a Python number (a 0-d result).

    Example:
        >>> ember.searchsorted(ember.tensor([1, 3, 5]), ember.tensor([3, 6])).tolist()
        [1, 3]
    """
    if side is not None:
        if side not in ("left", "right"):
            raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
        if right and side == "left":
            raise ValueError("searchsorted: side='left' contradicts right=True")
        right = side == "right"
    if sorter is not None:
        if sorter.shape != sorted_sequence.shape:
            raise ShapeError("searchsorted", f"sorter of shape {sorter.shape} does not match sorted_sequence "
                                             f"of shape {sorted_sequence.shape}")
        sorted_sequence = sorted_sequence.gather(-1, sorter.cast(i64))
    if not isinstance(values, Tensor):
        values = tensor(values, device=sorted_sequence.device)
    dtype = result_type(sorted_sequence, values)
    return apply("searchsorted", sorted_sequence.cast(dtype), values.cast(dtype), right=bool(right),
                 out_int32=bool(out_int32))


def bucketize(x, boundaries: Tensor, *, out_int32: bool = False, right: bool = False) -> Tensor:
    """The bucket of each element of `x` given the sorted 1-d `boundaries`: the index `i` with
    `boundaries[i-1] < x <= boundaries[i]` (`right=True`: `boundaries[i-1] <= x < boundaries[i]`).

    Example:
        >>> ember.bucketize(ember.tensor([1, 5]), ember.tensor([1, 3, 5]), right=True).tolist()
        [1, 3]
    """
    if boundaries.ndim != 1:
        raise ShapeError("bucketize", f"boundaries must be 1-d, got shape {boundaries.shape}")
    return searchsorted(boundaries, x, out_int32=out_int32, right=right)


METHODS = {
    "unique": unique, "unique_consecutive": unique_consecutive, "bincount": bincount, "histc": histc,
}
