"""`grid_sample` and `affine_grid`: sampling an image at given points (spatial transformers), PyTorch's rules.

`grid_sample` is a composition: each output point reads the corners around its source coordinate with
one `gather` over the flattened spatial dims (whose gradient is a scatter-add into the input) and
weights them by arithmetic on the grid (whose gradient is the grid's). For a 4-d input (N, C, H, W) and a
grid (N, Ho, Wo, 2) holding (x, y) in [-1, 1] (5-d: (N, C, D, H, W), grid (..., 3) holding (x, y, z)):

- unnormalize: with align_corners, -1 and 1 are the centers of the corner pixels,
  c = (g + 1) / 2 * (n - 1); without, their outer edges, c = ((g + 1) * n - 1) / 2.
- padding_mode "border" clamps c to [0, n - 1]; "reflection" reflects it about the edges (pixel
  centers with align_corners, outer edges without), then clamps; "zeros" leaves it.
- bilinear (trilinear for 5-d): corners floor(c) and floor(c) + 1 per dim, weights (floor(c) + 1 - c)
  and (c - floor(c)); nearest: the corner round-half-even(c). A corner outside the input reads 0.

Example:
    >>> grid = affine_grid(ember.tensor([[[1.0, 0, 0], [0, 1, 0]]]), (1, 1, 4, 4), align_corners=False)
    >>> grid_sample(ember.randn(1, 1, 4, 4), grid, align_corners=False).shape
    (1, 1, 4, 4)
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ...api.creation import from_numpy
from ...api.math import where
from ...errors import DTypeError, ShapeError
from ...tensor import Tensor

MODES = ("bilinear", "nearest")
PADDING_MODES = ("zeros", "border", "reflection")


def _unnormalize(g: Tensor, n: int, align_corners: bool) -> Tensor:
    return (g + 1) / 2 * (n - 1) if align_corners else ((g + 1) * n - 1) / 2


def _reflect(c: Tensor, twice_low: int, twice_high: int) -> Tensor:
    """`c` reflected into [twice_low / 2, twice_high / 2] about its ends, as often as it takes."""
    if twice_low == twice_high:
        return c * 0
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    distance = (c - low).abs()
    flips = (distance / span).floor()
    extra = distance - flips * span  # fmod(distance, span), distance >= 0
    even = (flips - (flips / 2).floor() * 2) == 0
    return where(even, extra + low, span - extra + low)


def _source(g: Tensor, n: int, padding_mode: str, align_corners: bool) -> Tensor:
    """The source coordinate (in pixels) of grid values `g` along a dim of `n` elements."""
    c = _unnormalize(g, n, align_corners)
    if padding_mode == "reflection":
        c = _reflect(c, 0, 2 * (n - 1)) if align_corners else _reflect(c, -1, 2 * n - 1)
    if padding_mode != "zeros":
        c = c.clamp(0, n - 1)
    return c


def _corners(c: Tensor, mode: str) -> list[tuple[Tensor, Tensor | None]]:
    """[(corner position as a float tensor, its weight or None for 1)] for source coordinates `c`."""
    if mode == "nearest":
        return [(c.round(), None)]
    low = c.floor()
    high = low + 1
    return [(low, high - c), (high, c - low)]


def _check(input: Tensor, grid: Tensor, mode: str, padding_mode: str) -> int:
    """The number of spatial dims, after checking the arguments in `grid_sample`'s terms."""
    if mode not in MODES:
        raise ShapeError("grid_sample", f"unknown mode {mode!r}; known: {list(MODES)}")
    if padding_mode not in PADDING_MODES:
        raise ShapeError("grid_sample", f"unknown padding_mode {padding_mode!r}; known: {list(PADDING_MODES)}")
    if input.ndim not in (4, 5):
        raise ShapeError("grid_sample", f"input must be (N, C, H, W) or (N, C, D, H, W), got shape {input.shape}")
    nd = input.ndim - 2
    if grid.ndim != input.ndim or grid.shape[0] != input.shape[0] or grid.shape[-1] != nd:
        want = "(N, H_out, W_out, 2)" if nd == 2 else "(N, D_out, H_out, W_out, 3)"
        raise ShapeError("grid_sample", f"grid of shape {grid.shape} for input of shape {input.shape}: "
                                        f"it must be {want} with N = {input.shape[0]}")
    if any(n == 0 for n in input.shape[2:]):
        raise ShapeError("grid_sample", f"input of shape {input.shape} has an empty spatial dim")
    if not (input.dtype.is_float and grid.dtype == input.dtype):
        raise DTypeError(f"grid_sample: input and grid must have one floating-point dtype, got {input.dtype} "
                         f"and {grid.dtype}")
    return nd


def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners: bool = False) -> Tensor:
    """Sample `input` at the points of `grid` (see the module docs for the math).

    Args:
        input: (N, C, H, W), or (N, C, D, H, W).
        grid: (N, H_out, W_out, 2) of (x, y) in [-1, 1] (x along W), or (N, D_out, H_out, W_out, 3).
        mode: "bilinear" (trilinear on 5-d input) or "nearest".
        padding_mode: what points outside the input read: "zeros", "border" (the edge's value) or
            "reflection" (the input mirrored at its edges).
        align_corners: whether -1 and 1 are the centers of the corner pixels (True) or their outer
            edges (False, PyTorch's default).
    The result is (N, C, H_out, W_out) (or (N, C, D_out, H_out, W_out)), differentiable with respect to
    `input` and `grid`.

    Example:
        >>> x = ember.arange(4.0).reshape(1, 1, 2, 2)
        >>> grid_sample(x, ember.tensor([[[[0.0, 0.0]]]]), align_corners=True).tolist()
        [[[[1.5]]]]
    """
    nd = _check(input, grid, mode, padding_mode)
    n, channels, *sizes = input.shape
    out_shape = grid.shape[1:-1]
    points = math.prod(out_shape)
    # per spatial dim d (D, H, W order), its source coordinates, flattened to (N, 1, P); the grid's last
    # axis holds them in reverse (x first)
    coords = [_source(grid[..., nd - 1 - d].reshape(n, 1, points), size, padding_mode, align_corners)
              for d, size in enumerate(sizes)]
    strides = [math.prod(sizes[d + 1:]) for d in range(nd)]
    flat = input.reshape(n, channels, math.prod(sizes))
    out = None
    for corner in itertools.product(*(_corners(c, mode) for c in coords)):
        index, weight = None, None
        for (position, w), size, stride in zip(corner, sizes, strides):
            inside = ((position >= 0) & (position <= size - 1)).cast(input.dtype)
            w = inside if w is None else w * inside
            weight = w if weight is None else weight * w
            term = position.clamp(0, size - 1).cast("i64") * stride
            index = term if index is None else index + term
        term = flat.gather(2, index.detach().expand(n, channels, points)) * weight
        out = term if out is None else out + term
    return out.reshape(n, channels, *out_shape)


def _base_coordinates(steps: int, align_corners: bool, dtype: np.dtype) -> np.ndarray:
    """PyTorch's `linspace_from_neg_one`: the normalized coordinates of `steps` pixel centers."""
    if steps <= 1:
        return np.zeros(steps, dtype)
    values = np.linspace(-1, 1, steps, dtype=np.float64)
    return (values if align_corners else values * (steps - 1) / steps).astype(dtype)


def affine_grid(theta: Tensor, size, align_corners: bool = False) -> Tensor:
    """The sampling grid of the affine maps `theta`, for `grid_sample` into an output of `size`.

    Args:
        theta: (N, 2, 3) (or (N, 3, 4) for 5-d sizes): each maps output (x, y, 1) to input (x, y).
        size: the output's (N, C, H, W) (or (N, C, D, H, W)).
        align_corners: as in `grid_sample` (use the same value for both).
    Returns (N, H, W, 2) (or (N, D, H, W, 3)), differentiable with respect to `theta`.

    Example:
        >>> affine_grid(ember.tensor([[[1.0, 0, 0], [0, 1, 0]]]), (1, 3, 2, 2), align_corners=True).tolist()[0][0]
        [[-1.0, -1.0], [1.0, -1.0]]
    """
    size = tuple(size)
    if len(size) not in (4, 5) or any(not isinstance(s, int) or s < 0 for s in size):
        raise ShapeError("affine_grid", f"size must be (N, C, H, W) or (N, C, D, H, W), got {size!r}")
    nd = len(size) - 2
    if theta.shape != (size[0], nd, nd + 1):
        raise ShapeError("affine_grid", f"theta of shape {theta.shape} for size {size}: it must be "
                                        f"({size[0]}, {nd}, {nd + 1})")
    if not theta.dtype.is_float:
        raise DTypeError(f"affine_grid: theta must be floating-point, got {theta.dtype}")
    spatial = size[2:]
    axes = [_base_coordinates(s, align_corners, theta.dtype.np) for s in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")  # per dim (D, H, W order), over the output's points
    base = np.stack([*reversed(mesh), np.ones(spatial, theta.dtype.np)], axis=-1).reshape(1, -1, nd + 1)
    grid = from_numpy(base, device=theta.device) @ theta.transpose(1, 2)
    return grid.reshape(size[0], *spatial, nd)
