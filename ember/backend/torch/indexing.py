"""Rows of the index primitives: gather, scatter (overwrite or add), index_select, index_add.

Indices are data: each row checks them against the dim's size first and raises IndexError naming the
op (as the references do) rather than letting a device assert. Negative indices are refused, as in
PyTorch. Overwriting scatters with repeated indices keep one of the written values, as PyTorch does.

Example:
    >>> ROWS["gather"](Aval((1, 2), f32), torch.tensor([[1., 2., 3.]]), torch.tensor([[2, 0]]), dim=1)
    tensor([[3., 1.]])
"""

from __future__ import annotations

import torch


def _check_bounds(op: str, index, size: int, dim: int) -> None:
    if index.numel():
        low, high = int(index.min()), int(index.max())
        if low < 0 or high >= size:
            raise IndexError(f"{op}: index {low if low < 0 else high} is out of bounds for dim {dim} "
                             f"with size {size}")


def _gather(out, x, index, *, dim):
    if x.ndim == 0:
        _check_bounds("gather", index, 1, dim)
        return x.clone()
    _check_bounds("gather", index, x.shape[dim], dim)
    return torch.gather(x, dim, index.long())


def _scatter(out, x, index, src, *, dim, reduce):
    _check_bounds("scatter", index, x.shape[dim] if x.ndim else 1, dim)
    if x.ndim == 0:
        return src.clone() if reduce is None else x + src
    values = src[tuple(slice(0, n) for n in index.shape)]
    if reduce == "add":
        return x.scatter_add(dim, index.long(), values)
    return x.scatter(dim, index.long(), values)


def _index_select(out, x, index, *, dim):
    if x.ndim == 0:
        return x.expand(index.shape).clone()
    _check_bounds("index_select", index, x.shape[dim], dim)
    return torch.index_select(x, dim, index.long())


def _index_add(out, x, index, src, *, dim):
    _check_bounds("index_add", index, x.shape[dim] if x.ndim else 1, dim)
    if x.ndim == 0:
        return x + src.sum().to(x.dtype)
    return x.index_add(dim, index.long(), src)


def _embedding(out, weight, indices, *, padding_idx, scale_grad_by_freq):
    rows = weight.shape[0]
    if indices.numel():
        bad = (indices < 0) | (indices >= rows)
        if bool(bad.any()):
            raise IndexError(f"embedding: index {int(indices[bad].flatten()[0])} is out of range for a "
                             f"table of {rows} rows")
    return weight[indices.long()]


ROWS = {
    "gather": _gather, "scatter": _scatter, "index_select": _index_select, "index_add": _index_add,
    "embedding": _embedding,
}
"""Primitive name -> `row(out_aval, *tensors, **params) -> tensor`."""
