"""Pixel shuffle: moving channel blocks into spatial positions and back (sub-pixel convolution), by
reshape and permute.

Example:
    >>> PixelShuffle(2)(ember.zeros(1, 8, 3, 3)).shape
    (1, 2, 6, 6)
"""

from __future__ import annotations

from ..errors import ShapeError
from ..tensor import Tensor
from .module import Module


def pixel_shuffle(x: Tensor, upscale_factor: int) -> Tensor:
    """Rearrange (*, C r^2, H, W) into (*, C, H r, W r).

    Args:
        x: input with at least 3 dims; its channel count must be divisible by r^2.
        upscale_factor: r.
    `y[..., c, h r + i, w r + j] = x[..., c r^2 + i r + j, h, w]`.

    Example:
        >>> pixel_shuffle(ember.zeros(4, 2, 2), 2).shape
        (1, 4, 4)
    """
    r = upscale_factor
    if x.ndim < 3 or r <= 0 or x.shape[-3] % (r * r):
        raise ShapeError("pixel_shuffle", f"input of shape {x.shape} needs (*, C, H, W) with C divisible by "
                                          f"upscale_factor^2 = {r * r}")
    *batch, c, h, w = x.shape
    n = len(batch)
    y = x.reshape(*batch, c // (r * r), r, r, h, w)
    y = y.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return y.reshape(*batch, c // (r * r), h * r, w * r)


def pixel_unshuffle(x: Tensor, downscale_factor: int) -> Tensor:
    """Rearrange (*, C, H r, W r) into (*, C r^2, H, W), the inverse of `pixel_shuffle`.

    Args:
        x: input with at least 3 dims; its height and width must be divisible by r.
        downscale_factor: r.

    Example:
        >>> pixel_unshuffle(ember.zeros(1, 4, 4), 2).shape
        (4, 2, 2)
    """
    r = downscale_factor
    if x.ndim < 3 or r <= 0 or x.shape[-2] % r or x.shape[-1] % r:
        raise ShapeError("pixel_unshuffle", f"input of shape {x.shape} needs (*, C, H, W) with H and W "
                                            f"divisible by downscale_factor = {r}")
    *batch, c, h, w = x.shape
    n = len(batch)
    y = x.reshape(*batch, c, h // r, r, w // r, r)
    y = y.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return y.reshape(*batch, c * r * r, h // r, w // r)


class PixelShuffle(Module):
    """`pixel_shuffle(x, upscale_factor)` as a module.

    Args:
        upscale_factor: r; (*, C r^2, H, W) becomes (*, C, H r, W r).

    Example:
        >>> PixelShuffle(3)(ember.zeros(2, 9, 4, 4)).shape
        (2, 1, 12, 12)
    """

    def __init__(self, upscale_factor: int) -> None:
        self.upscale_factor = upscale_factor

    def forward(self, x: Tensor) -> Tensor:
        return pixel_shuffle(x, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """`pixel_unshuffle(x, downscale_factor)` as a module.

    Args:
        downscale_factor: r; (*, C, H r, W r) becomes (*, C r^2, H, W).

    Example:
        >>> PixelUnshuffle(2)(ember.zeros(2, 1, 4, 4)).shape
        (2, 4, 2, 2)
    """

    def __init__(self, downscale_factor: int) -> None:
        self.downscale_factor = downscale_factor

    def forward(self, x: Tensor) -> Tensor:
        return pixel_unshuffle(x, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"
