"""Index primitives: gather, scatter (overwrite or add), index_select, index_add.

`index` tensors are i64. `gather`/`scatter` follow PyTorch: `index` has the rank of `x`, and along
`dim` picks positions; elsewhere it may be smaller than `x` (only its extent is used).

Example:
    >>> registry["gather"].infer(Aval((3, 4), f32), Aval((3, 2), i64), dim=1)
    Aval(shape=(3, 2), dtype=f32)
"""

from __future__ import annotations

import numpy as np

from ..errors import DTypeError, ShapeError
from .constants import kept
from .primitive import Aval, primitive, saves_inputs_at


def _check_index(op: str, index: Aval) -> None:
    if not index.dtype.is_int:
        raise DTypeError(f"{op}: index must be an integer tensor, got {index.dtype}")


def _gather_infer(x: Aval, index: Aval, *, dim: int) -> Aval:
    _check_index("gather", index)
    if len(index.shape) != len(x.shape) or any(
            i != dim and index.shape[i] > x.shape[i] for i in range(len(x.shape))):
        raise ShapeError("gather", f"index of shape {index.shape} does not fit input of shape {x.shape} "
                                   f"at dim {dim}")
    return Aval(index.shape, x.dtype)


def _check_bounds(op: str, index, size: int, dim: int) -> None:
    """Indices are data: check them where they are used. Negative ones are refused, as in PyTorch
    (NumPy would wrap them around silently)."""
    if index.size and (index.min() < 0 or index.max() >= size):
        bad = index.min() if index.min() < 0 else index.max()
        raise IndexError(f"{op}: index {bad} is out of bounds for dim {dim} with size {size}")


def _full_index(index, dim):
    """NumPy fancy-index tuple selecting `index` along `dim` and the identity elsewhere."""
    grids = list(np.ix_(*(np.arange(n) for n in index.shape)))
    grids[dim] = index
    return tuple(grids)


def _gather_reference(x, index, *, dim):
    if x.ndim == 0:
        _check_bounds("gather", index, 1, dim)
        return x.copy()
    _check_bounds("gather", index, x.shape[dim], dim)
    return x[_full_index(index, dim)]


_positions: dict = {}  # (size, dim, ndim, dtype) -> arange(size) along `dim`, kept per device


def _gather_vjp(ctx, g):
    """Each gathered gradient added at its index along `dim` of zeros (a scatter-add). Where the index
    picks one element per row of `dim` (its size there 1, the input's elsewhere: cross entropy's picked
    log-probabilities) no two land on one element, and the gradient is `where(positions == index, g, 0)`
    instead: elementwise, so a fused device runs it in the kernel of its neighbours, with no zeros made
    and no scatter (whose host time a small training step notices)."""
    index = ctx.input(1)
    (shape, _), _ = ctx.input_avals
    dim = ctx.params["dim"]
    if len(shape) and index.shape[dim] == 1 and all(n == m for d, (n, m) in enumerate(zip(index.shape, shape))
                                                     if d != dim):
        along = tuple(n if d == dim else 1 for d, n in enumerate(shape))
        positions = kept(_positions, (shape[dim], dim, len(shape), index.dtype),
                         lambda: np.arange(shape[dim], dtype=index.dtype.np).reshape(along), g)
        return g.where(positions == index, 0), None
    return g.new_zeros(shape).scatter_add(dim, index, g), None


primitive("gather", infer=_gather_infer, vjp=_gather_vjp, saves=saves_inputs_at(1))(_gather_reference)


def _scatter_infer(x: Aval, index: Aval, src: Aval, *, dim: int, reduce) -> Aval:
    _check_index("scatter", index)
    if len(index.shape) != len(x.shape) or len(src.shape) != len(x.shape) or any(
            index.shape[i] > src.shape[i] or (i != dim and index.shape[i] > x.shape[i])
            for i in range(len(x.shape))):
        raise ShapeError("scatter", f"index {index.shape} does not fit input {x.shape} and source "
                                    f"{src.shape} at dim {dim}")
    if src.dtype is not x.dtype:
        raise DTypeError(f"scatter: source dtype {src.dtype} differs from input dtype {x.dtype}")
    return x


def _scatter_reference(x, index, src, *, dim, reduce):
    out = x.copy()
    _check_bounds("scatter", index, x.shape[dim] if x.ndim else 1, dim)
    if x.ndim == 0:
        return src.copy() if reduce is None else out + src
    where = _full_index(index, dim)
    values = src[tuple(slice(0, n) for n in index.shape)]
    if reduce == "add":
        np.add.at(out, where, values)
    else:
        out[where] = values
    return out


def _scatter_vjp(ctx, g):
    index = ctx.input(1)
    dim = ctx.params["dim"]
    gx = g if ctx.params["reduce"] == "add" else g.scatter(dim, index, g.new_zeros(index.shape))
    gsrc_part = g.gather(dim, index)
    (src_shape, _) = ctx.input_avals[2]
    if tuple(index.shape) != tuple(src_shape):
        pads = [(0, s - n) for s, n in zip(src_shape, index.shape)]
        gsrc_part = gsrc_part.pad([p for pair in reversed(pads) for p in pair])
    return gx, None, gsrc_part


primitive("scatter", infer=_scatter_infer, vjp=_scatter_vjp, saves=saves_inputs_at(1))(_scatter_reference)


def _index_select_infer(x: Aval, index: Aval, *, dim: int) -> Aval:
    _check_index("index_select", index)
    if len(index.shape) != 1:
        raise ShapeError("index_select", f"index must be 1-D, got shape {index.shape}")
    return Aval(x.shape[:dim] + index.shape + x.shape[dim + 1:], x.dtype)


def _index_select_reference(x, index, *, dim):
    if x.ndim == 0:
        return np.broadcast_to(x, index.shape).copy()
    _check_bounds("index_select", index, x.shape[dim], dim)
    return np.take(x, index, axis=dim)


def _index_select_vjp(ctx, g):
    index = ctx.input(1)
    (shape, _), _ = ctx.input_avals
    return g.new_zeros(shape).index_add(ctx.params["dim"], index, g), None


primitive("index_select", infer=_index_select_infer, vjp=_index_select_vjp, saves=saves_inputs_at(1))(_index_select_reference)


def _index_add_infer(x: Aval, index: Aval, src: Aval, *, dim: int) -> Aval:
    _check_index("index_add", index)
    want = x.shape[:dim] + index.shape + x.shape[dim + 1:]
    if len(index.shape) != 1 or src.shape != want:
        raise ShapeError("index_add", f"source of shape {src.shape} does not fit input {x.shape} "
                                      f"with index {index.shape} at dim {dim}")
    return x


def _index_add_reference(x, index, src, *, dim):
    out = x.copy()
    _check_bounds("index_add", index, x.shape[dim] if x.ndim else 1, dim)
    if x.ndim == 0:
        return out + src.sum()
    where = [slice(None)] * x.ndim
    where[dim] = index
    np.add.at(out, tuple(where), src)
    return out


def _index_add_vjp(ctx, g):
    index = ctx.input(1)
    return g, None, g.index_select(ctx.params["dim"], index)


primitive("index_add", infer=_index_add_infer, vjp=_index_add_vjp, saves=saves_inputs_at(1))(_index_add_reference)
