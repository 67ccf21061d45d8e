"""`interpolate` against PyTorch for every mode, sizes and scale factors (up and down), align_corners
both ways and recompute_scale_factor: outputs and input gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
from ember.nn import functional as F
from ops.torch_check import FLOAT_DTYPES, check_op, random

SHAPES = {"nearest": [(2, 3, 7), (2, 2, 5, 6), (1, 2, 3, 4, 5)], "nearest-exact": [(2, 3, 7), (2, 2, 5, 6)],
          "area": [(2, 3, 9), (2, 2, 9, 7)], "linear": [(2, 3, 7)], "bilinear": [(2, 2, 5, 6)],
          "bicubic": [(2, 2, 5, 6)], "trilinear": [(1, 2, 3, 4, 5)]}
RESIZES = [dict(size=11), dict(size=3), dict(scale_factor=1.7), dict(scale_factor=0.6),
           dict(scale_factor=2.0, recompute_scale_factor=True)]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("mode", sorted(SHAPES))
def test_interpolate_matches_torch(device, rng, mode, dtype):
    corners = [False, True] if mode in ("linear", "bilinear", "bicubic", "trilinear") else [None]
    for shape in SHAPES[mode]:
        for resize in RESIZES:
            for align_corners in corners:
                x = random(rng, shape, dtype)
                kw = dict(mode=mode, align_corners=align_corners, **resize)
                check_op(lambda x: F.interpolate(x, **kw), lambda x: torch.nn.functional.interpolate(x, **kw), [x],
                         device, rng=rng)


def test_interpolate_per_dim_sizes_and_empty_batch(device, rng):
    x = random(rng, (2, 2, 5, 6))
    for kw in (dict(size=(3, 9), mode="bilinear"), dict(scale_factor=(2.5, 0.5), mode="bicubic", align_corners=True),
               dict(size=(10, 12), mode="nearest")):
        check_op(lambda x: F.interpolate(x, **kw), lambda x: torch.nn.functional.interpolate(x, **kw), [x], device)
    empty = random(rng, (0, 2, 5, 6))
    check_op(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"),
             lambda x: torch.nn.functional.interpolate(x, scale_factor=2, mode="bilinear"), [empty], device)


def test_interpolate_nearest_keeps_integers(device, rng):
    x = rng.integers(0, 255, size=(2, 2, 5, 6)).astype(np.uint8)
    got = F.interpolate(ember.tensor(x, device=device), scale_factor=1.7)
    want = torch.nn.functional.interpolate(torch.from_numpy(x), scale_factor=1.7)
    assert got.dtype.name == "u8"
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_interpolate_errors():
    x = ember.ones(1, 2, 4, 4)
    with pytest.raises(ember.ShapeError, match="exactly one of size and scale_factor"):
        F.interpolate(x)
    with pytest.raises(ember.ShapeError, match="exactly one of size and scale_factor"):
        F.interpolate(x, size=2, scale_factor=2)
    with pytest.raises(ember.ShapeError, match="unknown mode 'cubic'"):
        F.interpolate(x, size=2, mode="cubic")
    with pytest.raises(ember.ShapeError, match="'linear' needs a 3-d input"):
        F.interpolate(x, size=2, mode="linear")
    with pytest.raises(ember.ShapeError, match="align_corners can only be set"):
        F.interpolate(x, size=2, align_corners=True)
    with pytest.raises(ember.ShapeError, match="size must be a positive int or 2"):
        F.interpolate(x, size=(2, 2, 2))
    with pytest.raises(ember.ShapeError, match="empty output"):
        F.interpolate(x, scale_factor=0.1)
    with pytest.raises(ember.DTypeError, match="'bilinear' needs a floating-point input, got u8"):
        F.interpolate(x.cast("u8"), size=2, mode="bilinear")
