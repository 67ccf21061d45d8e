"""Movement: reshaping, reordering, joining, splitting, padding and triangular masks.

Every function returns a new tensor; on the NumPy backend most are views sharing memory, which is safe
because tensors are immutable.

Example:
    >>> x = ember.arange(6).reshape(2, 3)
    >>> x.T.shape, x.flatten().shape, ember.cat([x, x], dim=0).shape
    ((3, 2), (6,), (4, 3))
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..errors import ShapeError
from ..ops.primitive import normalize_dim
from ._common import Tensor, apply, bind, promote, registry, shape_arg
from .creation import from_numpy

_PERMUTE = registry["permute"]
_INT = frozenset({int})


def reshape(x: Tensor, *shape) -> Tensor:
    """The same elements in `shape`; one size may be -1 and is inferred.

    Example:
        >>> ember.arange(6).reshape(3, -1).shape
        (3, 2)
    """
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    if set(map(type, shape)) - _INT:  # a traced size keeps its formula (checked without a Python frame)
        shape = tuple(n if isinstance(n, int) else int(n) for n in shape)
    shape = tuple(shape)
    if shape.count(-1) > 1:
        raise ShapeError("reshape", f"only one size may be -1, got {shape}")
    if -1 in shape:
        known = math.prod(n for n in shape if n != -1)
        if known == 0 or x.numel % known:
            raise ShapeError("reshape", f"cannot reshape {x.shape} ({x.numel} elements) into {shape}")
        shape = tuple(x.numel // known if n == -1 else n for n in shape)
    if shape == x.shape:
        return x
    return apply("reshape", x, shape=shape)


def permute(x: Tensor, *dims) -> Tensor:
    """The dims of `x` reordered: output dim i is input dim `dims[i]`."""
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    ndim = len(x._aval.shape)
    if len(dims) != ndim:
        raise ShapeError("permute", f"{len(dims)} dims given for a tensor of shape {x.shape}")
    dims = tuple([normalize_dim("permute", d, ndim) for d in dims])
    if dims == tuple(range(ndim)):
        return x
    return bind(_PERMUTE, (x,), {"dims": dims})


def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    """`x` with two dims swapped."""
    ndim = len(x._aval.shape)
    if ndim == 0:
        return x
    a, b = normalize_dim("transpose", dim0, ndim), normalize_dim("transpose", dim1, ndim)
    if a == b:
        return x
    order = list(range(ndim))
    order[a], order[b] = b, a
    return bind(_PERMUTE, (x,), {"dims": tuple(order)})  # a permutation already: `permute`'s checks skipped


def _T(x: Tensor) -> Tensor:
    return permute(x, tuple(reversed(range(x.ndim))))


def movedim(x: Tensor, source, destination) -> Tensor:
    """Dims moved from `source` to `destination` positions (ints or sequences), others kept in order."""
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    if len(src) != len(dst):
        raise ShapeError("movedim", f"source {source} and destination {destination} differ in length")
    src = [normalize_dim("movedim", d, x.ndim) for d in src]
    dst = [normalize_dim("movedim", d, x.ndim) for d in dst]
    rest = iter(d for d in range(x.ndim) if d not in src)
    placed = dict(zip(dst, src))
    return permute(x, [placed[i] if i in placed else next(rest) for i in range(x.ndim)])


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Dims `start_dim..end_dim` merged into one (a 0-d tensor becomes 1-d)."""
    if x.ndim == 0:
        return reshape(x, 1)
    a, b = normalize_dim("flatten", start_dim, x.ndim), normalize_dim("flatten", end_dim, x.ndim)
    if a > b:
        raise ShapeError("flatten", f"start_dim {start_dim} comes after end_dim {end_dim} for shape {x.shape}")
    return reshape(x, x.shape[:a] + (math.prod(x.shape[a:b + 1]),) + x.shape[b + 1:])


def unflatten(x: Tensor, dim: int, sizes) -> Tensor:
    """Dim `dim` split into `sizes` (one may be -1)."""
    dim = normalize_dim("unflatten", dim, x.ndim)
    sizes = tuple(sizes)
    if -1 in sizes:
        known = math.prod(n for n in sizes if n != -1)
        sizes = tuple(x.shape[dim] // known if n == -1 else n for n in sizes)
    if math.prod(sizes) != x.shape[dim]:
        raise ShapeError("unflatten", f"sizes {sizes} do not multiply to dim {dim} of shape {x.shape}")
    return reshape(x, x.shape[:dim] + sizes + x.shape[dim + 1:])


def squeeze(x: Tensor, dim=None) -> Tensor:
    """Size-1 dims removed (all of them, or those in `dim` that have size 1)."""
    if dim is None:
        return reshape(x, tuple(n for n in x.shape if n != 1))
    dims = {normalize_dim("squeeze", d, x.ndim) for d in ((dim,) if isinstance(dim, int) else dim)}
    return reshape(x, tuple(n for i, n in enumerate(x.shape) if not (i in dims and n == 1)))


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    """A size-1 dim inserted at `dim` (which may be -1 for last)."""
    dim = normalize_dim("unsqueeze", dim, x.ndim + 1)
    return reshape(x, x.shape[:dim] + (1,) + x.shape[dim:])


def expand(x: Tensor, *shape) -> Tensor:
    """`x` broadcast to `shape` without copying; -1 keeps a size.

    Example:
        >>> ember.ones(3, 1).expand(3, 4).shape
        (3, 4)
    """
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    lead = len(shape) - x.ndim
    if lead < 0:
        raise ShapeError("expand", f"cannot expand {x.shape} to fewer dims {tuple(shape)}")
    shape = tuple(x.shape[i - lead] if n == -1 and i >= lead else n if isinstance(n, int) else int(n)
                  for i, n in enumerate(shape))
    if shape == x.shape:
        return x
    return apply("expand", x, shape=shape)


def broadcast_to(x: Tensor, shape) -> Tensor:
    """`x` broadcast to `shape` (PyTorch's functional name for `expand`)."""
    return expand(x, tuple(shape))


def repeat(x: Tensor, *sizes) -> Tensor:
    """`x` tiled `sizes[i]` times along dim i (PyTorch's `repeat`: len(sizes) >= ndim)."""
    sizes = shape_arg(sizes, "repeat")
    if len(sizes) < x.ndim:
        raise ShapeError("repeat", f"{len(sizes)} repeat sizes for a tensor of shape {x.shape}")
    x = reshape(x, (1,) * (len(sizes) - x.ndim) + x.shape)
    interleaved = tuple(v for n in x.shape for v in (1, n))
    tiled = tuple(v for r, n in zip(sizes, x.shape) for v in (r, n))
    return reshape(expand(reshape(x, interleaved), tiled), tuple(r * n for r, n in zip(sizes, x.shape)))


def tile(x: Tensor, *dims) -> Tensor:
    """Like `repeat`, but fewer sizes than dims repeat the trailing dims (NumPy's `tile`)."""
    dims = shape_arg(dims, "tile")
    return repeat(x, *((1,) * (x.ndim - len(dims)) + dims))


def flip(x: Tensor, *dims) -> Tensor:
    """`x` reversed along `dims`."""
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    dims = tuple(sorted({normalize_dim("flip", d, x.ndim) for d in dims})) if x.ndim else ()
    return apply("flip", x, dims=dims) if dims else x


def narrow(x: Tensor, dim: int, start: int, length: int) -> Tensor:
    """`length` elements of dim `dim` from `start` (which may be negative)."""
    dim = normalize_dim("narrow", dim, x.ndim)
    size = x.shape[dim]
    if start < 0:
        start += size
    if not (0 <= start <= size and 0 <= length and start + length <= size):
        raise ShapeError("narrow", f"start {start} and length {length} do not fit dim {dim} of shape {x.shape}")
    return _slice_ranges(x, tuple((start, start + length, 1) if i == dim else (0, n, 1)
                                  for i, n in enumerate(x.shape)))


def _slice_ranges(x: Tensor, ranges) -> Tensor:
    ranges = tuple(ranges)
    if all(r == (0, n, 1) for r, n in zip(ranges, x.shape)):
        return x
    return apply("slice", x, ranges=ranges)


def _slice_assign_ranges(x: Tensor, ranges, value: Tensor) -> Tensor:
    return apply("slice_assign", x, value.cast(x.dtype), ranges=tuple(ranges))


def roll(x: Tensor, shifts, dims=None) -> Tensor:
    """Elements shifted along `dims` with wrap-around (the flattened tensor when `dims` is None)."""
    if dims is None:
        return reshape(roll(flatten(x), shifts, 0), x.shape)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise ShapeError("roll", f"{len(shifts)} shifts for {len(dims)} dims")
    for shift, dim in zip(shifts, dims):
        dim = normalize_dim("roll", dim, x.ndim)
        n = x.shape[dim]
        if n == 0:
            continue
        k = shift % n
        if k:
            x = cat([narrow(x, dim, n - k, k), narrow(x, dim, 0, n - k)], dim)
    return x


def chunk(x: Tensor, chunks: int, dim: int = 0) -> list[Tensor]:
    """`x` cut into `chunks` pieces along `dim` (the last may be smaller; PyTorch's sizes)."""
    if chunks <= 0:
        raise ValueError(f"chunk: chunks must be positive, got {chunks}")
    dim = normalize_dim("chunk", dim, x.ndim)
    size = -(-x.shape[dim] // chunks) if x.shape[dim] else 1
    return split(x, size, dim)


def split(x: Tensor, split_size_or_sections, dim: int = 0) -> list[Tensor]:
    """Pieces of `x` along `dim`: all of `split_size` (the last may be smaller), or of the given sizes."""
    dim = normalize_dim("split", dim, x.ndim)
    n = x.shape[dim]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        if step <= 0:
            raise ValueError(f"split: split size must be positive, got {step}")
        sizes = [min(step, n - s) for s in range(0, n, step)] or [0]
    else:
        sizes = list(split_size_or_sections)
        if sum(sizes) != n:
            raise ShapeError("split", f"sections {sizes} do not add up to dim {dim} of shape {x.shape}")
    out, start = [], 0
    for size in sizes:
        out.append(narrow(x, dim, start, size))
        start += size
    return out


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Tensors joined along an existing dim (dtypes promoted; PyTorch skips 1-d empty tensors).

    Example:
        >>> ember.cat([ember.zeros(2), ember.ones(3)]).shape
        (5,)
    """
    tensors = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or list(tensors[:1])
    if not tensors:
        raise ValueError("cat: needs at least one tensor")
    tensors = promote(*tensors) if len({t.dtype for t in tensors}) > 1 else tuple(tensors)
    if any(t.ndim == 0 for t in tensors):
        raise ShapeError("cat", "zero-dimensional tensors cannot be concatenated; use stack")
    if len({t.ndim for t in tensors}) > 1:
        raise ShapeError("cat", f"tensors have different numbers of dims: {[t.shape for t in tensors]}")
    dim = normalize_dim("cat", dim, tensors[0].ndim)
    if len(tensors) == 1:
        return tensors[0]
    return apply("cat", *tensors, dim=dim)


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Tensors of one shape joined along a new dim."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("stack: needs at least one tensor")
    shapes = {t.shape for t in tensors}
    if len(shapes) > 1:
        raise ShapeError("stack", f"tensors must have one shape, got {sorted(shapes)}")
    dim = normalize_dim("stack", dim, tensors[0].ndim + 1)
    tensors = promote(*tensors) if len({t.dtype for t in tensors}) > 1 else tensors
    return apply("cat", *(unsqueeze(t, dim) for t in tensors), dim=dim)


def pad(x: Tensor, pad: Sequence[int], mode: str = "constant", value: float = 0.0) -> Tensor:
    """Padding in PyTorch's order: (left, right) of the last dim, then of the one before, and so on.

    Modes: `constant` (with `value`; negative widths crop), `reflect` (mirror without the edge) and
    `replicate` (repeat the edge).

    Example:
        >>> ember.tensor([1, 2, 3]).pad((2, 1), mode="reflect").tolist()
        [3, 2, 1, 2, 3, 2]
    """
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ShapeError("pad", f"padding {pad} needs pairs for at most {x.ndim} dims of shape {x.shape}")
    widths = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        widths[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    if mode == "constant":
        crop = [(max(-a, 0), n - max(-b, 0), 1) for (a, b), n in zip(widths, x.shape)]
        if any(a < 0 or b < 0 for a, b in widths):
            if any(lo > hi for lo, hi, _ in crop):
                raise ShapeError("pad", f"negative padding {pad} crops more than shape {x.shape}")
            x = _slice_ranges(x, crop)
        widths = tuple((max(a, 0), max(b, 0)) for a, b in widths)
        if not any(a or b for a, b in widths):
            return x
        return apply("pad", x, pads=widths, value=value)
    if mode not in ("reflect", "replicate"):
        raise ValueError(f"pad: unknown mode {mode!r}; known: constant, reflect, replicate")
    for dim, (a, b) in enumerate(widths):
        if a or b:
            x = x.index_select(dim, _pad_index(mode, x.shape[dim], a, b, x.device))
    return x


def _pad_index(mode: str, n: int, before: int, after: int, device) -> Tensor:
    if mode == "reflect" and (before >= n or after >= n):
        raise ShapeError("pad", f"reflect padding ({before}, {after}) must be smaller than the dim size {n}")
    if n == 0:
        raise ShapeError("pad", f"{mode} padding of an empty dim")
    positions = np.arange(-before, n + after)
    if mode == "replicate":
        index = np.clip(positions, 0, n - 1)
    else:
        period = 2 * (n - 1) if n > 1 else 1
        m = np.abs(positions) % period
        index = np.where(m < n, m, period - m)
    return from_numpy(index.astype(np.int64), device)


def _triangle(x: Tensor, diagonal: int, lower: bool) -> Tensor:
    if x.ndim < 2:
        raise ShapeError("tril" if lower else "triu", f"needs at least 2 dims, got shape {x.shape}")
    rows, cols = x.shape[-2:]
    i = np.arange(rows)[:, None]
    j = np.arange(cols)[None, :]
    keep = (j - i <= diagonal) if lower else (j - i >= diagonal)
    mask = from_numpy(keep, x.device)
    return x.masked_fill(~mask, 0)


def tril(x: Tensor, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two dims (elements above `diagonal` set to zero)."""
    return _triangle(x, diagonal, True)


def triu(x: Tensor, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two dims (elements below `diagonal` set to zero)."""
    return _triangle(x, diagonal, False)


def diagonal(x: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal of dims `dim1` and `dim2`, appended as the last dim (PyTorch's layout)."""
    a, b = normalize_dim("diagonal", dim1, x.ndim), normalize_dim("diagonal", dim2, x.ndim)
    if a == b:
        raise ShapeError("diagonal", f"dim1 and dim2 must differ, got {dim1} and {dim2}")
    moved = movedim(x, (a, b), (-2, -1))
    rows, cols = moved.shape[-2:]
    length = max(0, min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols))
    start_r, start_c = (0, offset) if offset >= 0 else (-offset, 0)
    flat = (np.arange(length) + start_r) * cols + np.arange(length) + start_c
    merged = reshape(moved, moved.shape[:-2] + (rows * cols,))
    return merged.index_select(-1, from_numpy(flat.astype(np.int64), x.device))


METHODS = {
    "reshape": reshape, "permute": permute, "transpose": transpose, "T": property(_T), "movedim": movedim,
    "flatten": flatten, "unflatten": unflatten, "squeeze": squeeze, "unsqueeze": unsqueeze,
    "expand": expand, "broadcast_to": broadcast_to, "repeat": repeat, "tile": tile, "flip": flip,
    "narrow": narrow, "roll": roll, "chunk": chunk, "split": split, "pad": pad, "tril": tril,
    "triu": triu, "diagonal": diagonal, "_slice_ranges": _slice_ranges,
    "_slice_assign_ranges": _slice_assign_ranges,
}


def meshgrid(*tensors: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids of 1-d (or 0-d) tensors: output `k` holds `tensors[k]` along dim `k`,
    repeated over the others (`indexing="xy"` swaps the first two dims, as NumPy's default).
    Accepts the tensors as arguments or as one list.

    Example:
        >>> gx, gy = ember.meshgrid(ember.tensor([1, 2]), ember.tensor([5, 6, 7]))
        >>> gx.shape, gy[0].tolist()
        ((2, 3), [5, 6, 7])
    """
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    if not tensors:
        raise ValueError("meshgrid expects at least one tensor")
    if any(t.ndim > 1 for t in tensors):
        raise ShapeError("meshgrid", f"expects 0-d or 1-d tensors, got shapes {[t.shape for t in tensors]}")
    swap = indexing == "xy" and len(tensors) >= 2
    order = [1, 0, *range(2, len(tensors))] if swap else list(range(len(tensors)))
    sizes = [tensors[k].numel for k in order]
    grids = []
    for k, t in enumerate(tensors):
        axis = order.index(k)
        view = [1] * len(tensors)
        view[axis] = t.numel
        grids.append(t.reshape(view).expand(tuple(sizes)))
    return tuple(grids)


def cartesian_prod(*tensors: Tensor) -> Tensor:
    """The cartesian product of 1-d tensors as rows of a (n1 * n2 * ..., k) tensor, the last tensor
    varying fastest (`itertools.product`'s order); one tensor comes back as it is.

    Example:
        >>> ember.cartesian_prod(ember.tensor([1, 2]), ember.tensor([3, 4])).tolist()
        [[1, 3], [1, 4], [2, 3], [2, 4]]
    """
    if any(t.ndim != 1 for t in tensors):
        raise ShapeError("cartesian_prod", f"expects 1-d tensors, got shapes {[t.shape for t in tensors]}")
    if len(tensors) == 1:
        return tensors[0]
    return stack([g.reshape(-1) for g in meshgrid(*tensors, indexing="ij")], dim=1)
