"""`Upsample`: resize the spatial dims by a size or a scale factor (`ember.nn.functional.interpolate`)."""

from __future__ import annotations

from ..tensor import Tensor
from .module import Module
from .functional.interpolate import interpolate


class Upsample(Module):
    """Resize (N, C, *spatial) to `size`, or by `scale_factor` (output floor(n * scale_factor)).

    Args:
        size: output spatial size, an int or one per dim.
        scale_factor: or a multiplier (one or per dim).
        mode: "nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear" or "area".
        align_corners: for the linear and cubic modes, align the corner pixels' centers.
        recompute_scale_factor: sample at n / m instead of 1 / scale_factor.
    See `interpolate` for each mode's sampling rule (PyTorch's, bicubic with A = -0.75).

    Example:
        >>> Upsample(scale_factor=2, mode="bilinear")(ember.randn(1, 3, 8, 8)).shape
        (1, 3, 16, 16)
    """

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest", align_corners: bool | None = None,
                 recompute_scale_factor: bool | None = None) -> None:
        self.size = size
        self.scale_factor = scale_factor
        self.mode = mode
        self.align_corners = align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, x: Tensor) -> Tensor:
        return interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners, self.recompute_scale_factor)

    def extra_repr(self) -> str:
        how = f"size={self.size}" if self.size is not None else f"scale_factor={self.scale_factor}"
        return f"{how}, mode={self.mode!r}"
