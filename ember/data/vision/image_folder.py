"""`ImageFolder`: images in one sub-directory per class, decoded with Pillow (`pip install ember[vision]`).

Example:
    root/cat/001.png, root/cat/002.jpg, root/dog/001.png  ->  classes ["cat", "dog"]

    >>> ds = ImageFolder("root", mode="RGB")  # doctest: +SKIP
    >>> image, label = ds[0]; image.shape, ds.classes[label]  # doctest: +SKIP
    ((32, 32, 3), 'cat')
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import numpy as np

from ..dataset import Dataset
from ..errors import DataError

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")


def pillow() -> ModuleType:
    """The `PIL.Image` module, or an ImportError saying how to install it.

    Example:
        >>> Image = pillow()  # doctest: +SKIP
    """
    try:
        from PIL import Image
    except ImportError as exc:
        raise ImportError("reading image files needs Pillow: pip install ember[vision]") from exc
    return Image


class ImageFolder(Dataset[tuple[np.ndarray, int]]):
    """Items `(image, class_index)`: uint8 arrays (H, W) for mode "L", (H, W, C) otherwise.

    Classes are the sub-directories of `root` in sorted order; files are taken in sorted order
    when their extension is in `extensions`. `mode` is a Pillow mode ("RGB", "L", "RGBA") every
    image is converted to, or None to keep each file's own.

    Example:
        >>> ds = ImageFolder("photos", mode="L")  # doctest: +SKIP
        >>> ds.classes, len(ds)  # doctest: +SKIP
        (['cat', 'dog'], 120)
    """

    def __init__(self, root: str | os.PathLike[str], mode: str | None = "RGB",
                 extensions: tuple[str, ...] = IMAGE_EXTENSIONS) -> None:
        pillow()  # fail here, not in the first worker, when Pillow is missing
        self.root = Path(root).expanduser()
        if not self.root.is_dir():
            raise DataError(f"{self.root}: ImageFolder root is not a directory")
        self.mode = mode
        self.classes = sorted(p.name for p in self.root.iterdir() if p.is_dir())
        wanted = {e.lower() for e in extensions}
        self.samples: list[tuple[Path, int]] = [
            (f, label)
            for label, name in enumerate(self.classes)
            for f in sorted((self.root / name).rglob("*"))
            if f.is_file() and f.suffix.lower() in wanted
        ]
        if not self.samples:
            raise DataError(f"{self.root}: no images with extensions {sorted(wanted)} in class "
                            f"sub-directories {self.classes}")

    def __len__(self) -> int:
        return len(self.samples)

    def get(self, i: int) -> tuple[np.ndarray, int]:
        path, label = self.samples[i]
        try:
            with pillow().open(path) as img:
                img = img.convert(self.mode) if self.mode is not None else img
                return np.asarray(img, dtype=np.uint8), label
        except OSError as exc:
            raise DataError(f"{path}: cannot decode image ({exc})") from exc
