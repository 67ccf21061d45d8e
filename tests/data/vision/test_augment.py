"""Augmentations: shapes, determinism by seed, and agreement with NumPy slicing, np.rot90 and np.pad."""

from __future__ import annotations

import numpy as np
import pytest

from ember.data.vision import augment as A
from ember.errors import ShapeError


@pytest.fixture(params=[(6, 5), (6, 5, 3)], ids=["HW", "HWC"])
def image(request: pytest.FixtureRequest) -> np.ndarray:
    # Distinct values, so a crop identifies its offset.
    return np.arange(np.prod(request.param), dtype=np.int32).reshape(request.param).astype(np.uint16)


def test_crop_and_pad_are_slicing(image: np.ndarray) -> None:
    np.testing.assert_array_equal(A.crop(image, 1, 2, 3, 2), image[1:4, 2:4])
    padded = A.pad(image, 2, fill=7)
    assert padded.shape[:2] == (10, 9) and padded.shape[2:] == image.shape[2:]
    np.testing.assert_array_equal(padded[2:-2, 2:-2], image)
    assert (padded[:2] == 7).all() and (padded[:, -2:] == 7).all()
    np.testing.assert_array_equal(A.pad(image, 1, mode="reflect")[0, 1:-1], image[1])
    with pytest.raises(ShapeError, match=r"does not fit an image of size \(6, 5\)"):
        A.crop(image, 4, 0, 3, 1)


@pytest.mark.parametrize("dtype", [np.uint8, np.int64, np.float32, np.bool_])
@pytest.mark.parametrize("shape", [(5, 7), (4, 3, 2), (0, 3), (1, 1)])
def test_constant_pad_equals_np_pad(dtype: type, shape: tuple) -> None:
    image = (np.random.default_rng(0).random(shape) * 200).astype(dtype)
    for padding, fill in ((0, 0), (1, 7), (3, 0.5)):
        expected = np.pad(image, [(padding, padding)] * 2 + [(0, 0)] * (image.ndim - 2), constant_values=fill)
        padded = A.pad(image, padding, fill)
        assert padded.dtype == expected.dtype and padded.shape == expected.shape
        np.testing.assert_array_equal(padded, expected)


def test_random_crop_is_a_window_of_the_padded_image(image: np.ndarray) -> None:
    padded = np.pad(image, [(1, 1), (1, 1)] + [(0, 0)] * (image.ndim - 2))
    offsets = set()
    for seed in range(200):
        out = A.random_crop(image, (4, 3), rng=seed, padding=1)
        assert out.shape[:2] == (4, 3) and out.dtype == image.dtype
        matches = [(t, l) for t in range(5) for l in range(5)
                   if np.array_equal(padded[t:t + 4, l:l + 3], out)]
        assert len(matches) == 1
        offsets |= set(matches)
        np.testing.assert_array_equal(out, A.random_crop(image, (4, 3), rng=seed, padding=1))
    assert offsets == {(t, l) for t in range(5) for l in range(5)}, "every position is reachable"
    with pytest.raises(ShapeError, match="larger than the padded image"):
        A.random_crop(image, 9, rng=0)


def test_flip_against_slicing(image: np.ndarray) -> None:
    np.testing.assert_array_equal(A.hflip(image), image[:, ::-1])
    np.testing.assert_array_equal(A.random_horizontal_flip(image, rng=0, p=1.0), image[:, ::-1])
    np.testing.assert_array_equal(A.random_horizontal_flip(image, rng=0, p=0.0), image)
    flips = [np.array_equal(A.random_horizontal_flip(image, rng=s), image[:, ::-1]) for s in range(200)]
    assert 60 < sum(flips) < 140
    gen_a, gen_b = np.random.default_rng(5), np.random.default_rng(5)
    for _ in range(10):
        np.testing.assert_array_equal(A.random_horizontal_flip(image, rng=gen_a),
                                      A.random_horizontal_flip(image, rng=gen_b))


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
@pytest.mark.parametrize("size", [(5, 5), (6, 6), (4, 4, 3)])
def test_right_angle_rotations_match_rot90(interpolation: str, size: tuple[int, ...]) -> None:
    image = np.random.default_rng(1).integers(0, 256, size, dtype=np.uint8)
    for degrees, k in ((90, 1), (180, 2), (-90, -1), (270, 3), (0, 0)):
        np.testing.assert_array_equal(A.rotate(image, degrees, interpolation), np.rot90(image, k))


def test_rotation_fills_outside_and_keeps_the_centre() -> None:
    image = np.full((7, 7), 200, dtype=np.uint8)
    out = A.rotate(image, 45, "nearest", fill=0)
    assert out[3, 3] == 200 and out[0, 0] == 0, "corners turn in from outside the image"
    smooth = A.rotate(np.full((7, 7), 10.0), 30, "bilinear", fill=10.0)
    np.testing.assert_allclose(smooth, 10.0)


def test_random_rotation_determinism_and_range() -> None:
    image = np.random.default_rng(2).integers(0, 256, (9, 9), dtype=np.uint8)
    a = A.random_rotation(image, 10, rng=3)
    np.testing.assert_array_equal(a, A.random_rotation(image, 10, rng=3))
    angle = np.random.default_rng(3).uniform(-10, 10)
    np.testing.assert_array_equal(a, A.rotate(image, angle))
    np.testing.assert_array_equal(A.random_rotation(image, 0, rng=9), image)
    with pytest.raises(ValueError, match="interpolation"):
        A.rotate(image, 5, "cubic")


def test_normalize_and_to_float() -> None:
    rgb = np.random.default_rng(0).integers(0, 256, (4, 4, 3), dtype=np.uint8)
    x = A.to_float(rgb)
    assert x.dtype == np.float32 and x.max() <= 1.0
    np.testing.assert_allclose(x, rgb / 255.0, rtol=1e-6)
    mean, std = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]
    out = A.normalize(x, mean, std)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, (rgb / 255.0 - np.array(mean)) / np.array(std), rtol=1e-5)
    np.testing.assert_allclose(A.normalize(np.array([[33.0]]), 33.0, 2.0), [[0.0]])
    with pytest.raises(ShapeError, match="one per channel"):
        A.normalize(x, [0.5, 0.5], [1.0, 1.0])
    with pytest.raises(ValueError, match="non-zero"):
        A.normalize(x, 0.0, 0.0)


def test_bad_inputs() -> None:
    with pytest.raises(ShapeError, match=r"\(H, W\) or \(H, W, C\), got \(3,\)"):
        A.hflip(np.zeros(3))
    with pytest.raises(TypeError, match="Generator or an int seed"):
        A.random_horizontal_flip(np.zeros((2, 2)), rng=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\]"):
        A.random_horizontal_flip(np.zeros((2, 2)), rng=0, p=2)


def test_inputs_are_not_modified() -> None:
    image = np.random.default_rng(0).integers(0, 256, (8, 8), dtype=np.uint8)
    before = image.copy()
    image.setflags(write=False)
    A.random_crop(image, 6, rng=1, padding=2)
    A.random_horizontal_flip(image, rng=1)
    A.random_rotation(image, 15, rng=1)
    A.normalize(image, 33.0, 78.0)
    np.testing.assert_array_equal(image, before)
