"""ImageFolder over PNG files written with Pillow, and the error when Pillow is missing."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from ember.data import DataError
from ember.data.vision import ImageFolder


def _make_folder(root: Path) -> dict[str, np.ndarray]:
    Image = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(0)
    written = {}
    for cls, count in (("dog", 2), ("cat", 3)):
        (root / cls).mkdir(parents=True)
        for k in range(count):
            pixels = rng.integers(0, 256, (5, 4, 3), dtype=np.uint8)
            path = root / cls / f"{k}.png"
            Image.fromarray(pixels).save(path)
            written[f"{cls}/{k}.png"] = pixels
    (root / "cat" / "notes.txt").write_text("not an image")
    return written


def test_classes_sorted_and_pixels_exact(tmp_path: Path) -> None:
    written = _make_folder(tmp_path)
    ds = ImageFolder(tmp_path)
    assert ds.classes == ["cat", "dog"] and len(ds) == 5
    for i, key in enumerate(["cat/0.png", "cat/1.png", "cat/2.png", "dog/0.png", "dog/1.png"]):
        image, label = ds[i]
        assert label == ds.classes.index(key.split("/")[0])
        np.testing.assert_array_equal(image, written[key])
    gray, _ = ImageFolder(tmp_path, mode="L")[0]
    assert gray.shape == (5, 4) and gray.dtype == np.uint8


def test_empty_and_missing_roots(tmp_path: Path) -> None:
    pytest.importorskip("PIL")
    (tmp_path / "empty_class").mkdir()
    with pytest.raises(DataError, match="no images with extensions"):
        ImageFolder(tmp_path)
    with pytest.raises(DataError, match="not a directory"):
        ImageFolder(tmp_path / "absent")


def test_missing_pillow_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(ImportError, match=r"pip install ember\[vision\]"):
        ImageFolder(tmp_path)


def test_undecodable_file_names_the_path(tmp_path: Path) -> None:
    pytest.importorskip("PIL")
    (tmp_path / "cls").mkdir()
    (tmp_path / "cls" / "broken.png").write_bytes(b"\x89PNG not really")
    ds = ImageFolder(tmp_path)
    with pytest.raises(DataError, match=r"broken.png: cannot decode image"):
        ds[0]
