"""Image augmentations on NumPy arrays of layout (H, W) or (H, W, C).

Random augmentations take `rng`, a `np.random.Generator` or an int seed, so that a run is
reproducible; the deterministic pieces (`crop`, `pad`, `hflip`, `rotate`) are public too. Inputs
are never modified; outputs keep the input dtype except `normalize` and `to_float`.

Example:
    >>> import numpy as np
    >>> image = np.arange(16, dtype=np.uint8).reshape(4, 4)
    >>> random_crop(image, 4, rng=0, padding=1).shape
    (4, 4)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from ember.errors import ShapeError

Rng = np.random.Generator | int
PadMode = Literal["constant", "edge", "reflect", "symmetric", "wrap"]


def crop(image: np.ndarray, top: int, left: int, height: int, width: int) -> np.ndarray:
    """`image[top:top + height, left:left + width]`, checking the window fits.

    Example:
        >>> crop(np.arange(9).reshape(3, 3), 1, 1, 2, 2).tolist()
        [[4, 5], [7, 8]]
    """
    h, w = _size(image, "crop")
    if not (0 <= top and 0 <= left and height >= 1 and width >= 1 and top + height <= h and left + width <= w):
        raise ShapeError("crop", f"window top={top} left={left} size ({height}, {width}) "
                                 f"does not fit an image of size ({h}, {w})")
    return image[top:top + height, left:left + width].copy()


def pad(image: np.ndarray, padding: int, fill: float = 0, mode: PadMode = "constant") -> np.ndarray:
    """`padding` pixels added on every side of H and W; `mode` as in `np.pad` ("constant" uses `fill`).

    Example:
        >>> pad(np.ones((1, 1), np.uint8), 1).tolist()
        [[0, 0, 0], [0, 1, 0], [0, 0, 0]]
    """
    _size(image, "pad")
    if padding < 0:
        raise ValueError(f"padding must be >= 0, got {padding}")
    if mode == "constant":
        # What np.pad(..., constant_values=fill) returns, built directly: np.pad's generic path costs
        # more than the rest of a small image's augmentation.
        h, w = image.shape[:2]
        out = np.full((h + 2 * padding, w + 2 * padding, *image.shape[2:]), fill, dtype=image.dtype)
        out[padding:padding + h, padding:padding + w] = image
        return out
    widths = [(padding, padding), (padding, padding)] + [(0, 0)] * (image.ndim - 2)
    return np.pad(image, widths, mode=mode)


def random_crop(image: np.ndarray, size: int | tuple[int, int], *, rng: Rng, padding: int = 0,
                fill: float = 0, pad_mode: PadMode = "constant") -> np.ndarray:
    """A `size` window at a uniformly random position of the image padded by `padding`.

    Example:
        >>> image = np.zeros((28, 28), np.uint8)
        >>> random_crop(image, 28, padding=4, rng=np.random.default_rng(0)).shape
        (28, 28)
    """
    height, width = (size, size) if isinstance(size, int) else size
    padded = pad(image, padding, fill, pad_mode) if padding else image
    h, w = padded.shape[:2]
    if height > h or width > w:
        raise ShapeError("random_crop", f"crop size ({height}, {width}) is larger than the padded "
                                        f"image ({h}, {w})")
    gen = _generator(rng)
    top = int(gen.integers(0, h - height + 1))
    left = int(gen.integers(0, w - width + 1))
    return crop(padded, top, left, height, width)


def hflip(image: np.ndarray) -> np.ndarray:
    """The image mirrored left to right.

    Example:
        >>> hflip(np.array([[1, 2, 3]])).tolist()
        [[3, 2, 1]]
    """
    _size(image, "hflip")
    return image[:, ::-1].copy()


def random_horizontal_flip(image: np.ndarray, *, rng: Rng, p: float = 0.5) -> np.ndarray:
    """`hflip(image)` with probability `p`, else a copy of `image`.

    Example:
        >>> random_horizontal_flip(np.array([[1, 2]]), rng=0, p=1.0).tolist()
        [[2, 1]]
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"flip probability p must be in [0, 1], got {p}")
    return hflip(image) if _generator(rng).random() < p else image.copy()


def rotate(image: np.ndarray, degrees: float, interpolation: str = "bilinear", fill: float = 0) -> np.ndarray:
    """The image turned `degrees` counter-clockwise (as displayed) about its centre, same size.

    Each output pixel samples the input at its position rotated back by `degrees`: "nearest" takes
    the closest pixel, "bilinear" mixes the four around it. Samples outside the image read `fill`.
    Integer images are rounded and clipped back to their dtype.

    Example:
        >>> rotate(np.array([[1, 2], [3, 4]], np.uint8), 90, "nearest").tolist()
        [[2, 4], [1, 3]]
    """
    h, w = _size(image, "rotate")
    if interpolation not in ("nearest", "bilinear"):
        raise ValueError(f"interpolation must be 'nearest' or 'bilinear', got {interpolation!r}")
    theta = np.deg2rad(degrees)
    cos, sin = np.cos(theta), np.sin(theta)
    cy, cx = (h - 1) / 2, (w - 1) / 2
    dy, dx = np.mgrid[0:h, 0:w].astype(np.float64)
    dy, dx = dy - cy, dx - cx
    # With y pointing down, a counter-clockwise turn by theta maps source s to output R s with
    # R = [[cos, sin], [-sin, cos]] (x first); so an output pixel reads the source at R^T o.
    src_x = cx + dx * cos - dy * sin
    src_y = cy + dx * sin + dy * cos
    values = image.astype(np.float64)
    if interpolation == "nearest":
        out = _sample(values, np.rint(src_y).astype(np.int64), np.rint(src_x).astype(np.int64), fill)
    else:
        y0, x0 = np.floor(src_y), np.floor(src_x)
        fy, fx = src_y - y0, src_x - x0
        if image.ndim == 3:
            fy, fx = fy[..., None], fx[..., None]
        y0, x0 = y0.astype(np.int64), x0.astype(np.int64)
        out = ((1 - fy) * (1 - fx) * _sample(values, y0, x0, fill)
               + (1 - fy) * fx * _sample(values, y0, x0 + 1, fill)
               + fy * (1 - fx) * _sample(values, y0 + 1, x0, fill)
               + fy * fx * _sample(values, y0 + 1, x0 + 1, fill))
    return _cast_like(out, image.dtype)


def random_rotation(image: np.ndarray, max_degrees: float, *, rng: Rng, interpolation: str = "bilinear",
                    fill: float = 0) -> np.ndarray:
    """`rotate(image, angle)` with `angle` uniform in [-max_degrees, max_degrees].

    Example:
        >>> random_rotation(np.zeros((28, 28), np.uint8), 15, rng=0).shape
        (28, 28)
    """
    if max_degrees < 0:
        raise ValueError(f"max_degrees must be >= 0, got {max_degrees}")
    angle = float(_generator(rng).uniform(-max_degrees, max_degrees))
    return rotate(image, angle, interpolation, fill)


def to_float(image: np.ndarray) -> np.ndarray:
    """A uint8 image scaled to float32 in [0, 1]; other dtypes are only cast to float32.

    Example:
        >>> to_float(np.array([0, 255], np.uint8)).tolist()
        [0.0, 1.0]
    """
    if image.dtype == np.uint8:
        return image.astype(np.float32) / np.float32(255)
    return image.astype(np.float32)


def normalize(image: np.ndarray, mean: float | Sequence[float], std: float | Sequence[float]) -> np.ndarray:
    """`(image - mean) / std` in float32; per-channel `mean`/`std` apply along the last axis (C).

    Example:
        >>> normalize(np.array([[0.5, 1.0]]), mean=0.5, std=0.25).tolist()
        [[0.0, 2.0]]
    """
    m = np.asarray(mean, dtype=np.float32)
    s = np.asarray(std, dtype=np.float32)
    channels = image.shape[-1] if image.ndim == 3 else 1
    for name, v in (("mean", m), ("std", s)):
        if v.ndim > 1 or (v.ndim == 1 and v.size != channels):
            raise ShapeError("normalize", f"{name} of shape {v.shape} does not match an image of shape "
                                          f"{image.shape} (one value, or one per channel on the last axis)")
    if np.any(s == 0):
        raise ValueError("normalize: std must be non-zero")
    return (image.astype(np.float32) - m) / s


def _size(image: np.ndarray, op: str) -> tuple[int, int]:
    if not isinstance(image, np.ndarray) or image.ndim not in (2, 3):
        shape = getattr(image, "shape", type(image).__name__)
        raise ShapeError(op, f"expected an image array of shape (H, W) or (H, W, C), got {shape}")
    return image.shape[0], image.shape[1]


def _generator(rng: Rng) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    raise TypeError(f"rng must be a numpy Generator or an int seed, got {type(rng).__name__}")


def _sample(values: np.ndarray, ys: np.ndarray, xs: np.ndarray, fill: float) -> np.ndarray:
    """values[ys, xs] where inside the image, `fill` elsewhere."""
    h, w = values.shape[:2]
    inside = (ys >= 0) & (ys < h) & (xs >= 0) & (xs < w)
    picked = values[np.clip(ys, 0, h - 1), np.clip(xs, 0, w - 1)]
    mask = inside[..., None] if values.ndim == 3 else inside
    return np.where(mask, picked, fill)


def _cast_like(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return np.clip(np.rint(values), info.min, info.max).astype(dtype)
    return values.astype(dtype)
