"""SQLite dataset: round trips of arrays, labels and splits; atomic writes; schema errors."""

from __future__ import annotations

import pickle
import sqlite3
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from ember.data import DataError, DataLoader, SqliteDataset, SqliteDatasetWriter
from ember.data.sqlite import SqliteItem


def _write(path: Path, n: int = 12, commit_every: int = 5) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    written = []
    with SqliteDatasetWriter(path, commit_every=commit_every) as w:
        for i in range(n):
            arrays = {"image": rng.integers(0, 256, (4, 3), dtype=np.uint8),
                      "feat": rng.standard_normal(5).astype(">f8"),
                      "half": rng.standard_normal((2, 2)).astype(ml_dtypes.bfloat16),
                      "scalar": np.int32(i)}
            w.write(arrays, label=i % 3, split="test" if i % 4 == 0 else "train")
            written.append(arrays)
    return written


def test_round_trip_by_split(tmp_path: Path) -> None:
    path = tmp_path / "d.db"
    written = _write(path)
    train, test, everything = SqliteDataset(path), SqliteDataset(path, "test"), SqliteDataset(path, None)
    train_ids = [i for i in range(12) if i % 4 != 0]
    test_ids = [i for i in range(12) if i % 4 == 0]
    assert (len(train), len(test), len(everything)) == (9, 3, 12)
    assert SqliteDataset.splits(path) == {"test": 3, "train": 9}
    for ds, ids in ((train, train_ids), (test, test_ids), (everything, list(range(12)))):
        for k, i in enumerate(ids):
            item = ds[k]
            assert item.label == i % 3
            assert list(item.arrays) == ["image", "feat", "half", "scalar"]
            for name, original in written[i].items():
                got = item.arrays[name]
                assert got.dtype == np.dtype(original.dtype.name) and got.shape == np.shape(original)
                np.testing.assert_array_equal(got.astype(np.float64), np.asarray(original).astype(np.float64))
    assert train[-1].arrays["scalar"] == 11


def test_labels_of_each_kind(tmp_path: Path) -> None:
    path = tmp_path / "labels.db"
    labels = [None, 3, 2.5, "cat", np.int64(7)]
    with SqliteDatasetWriter(path) as w:
        for label in labels:
            w.write({"x": np.zeros(1)}, label=label)
        assert len(w) == 5
    assert [item.label for item in SqliteDataset(path)] == [None, 3, 2.5, "cat", 7]


def test_pickled_dataset_opens_its_own_connection(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    _write(path)
    ds = SqliteDataset(path)
    first = ds[0]
    clone = pickle.loads(pickle.dumps(ds))
    np.testing.assert_array_equal(clone[0].arrays["image"], first.arrays["image"])


def test_writer_is_atomic(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    with pytest.raises(RuntimeError, match="boom"):
        with SqliteDatasetWriter(path) as w:
            w.write({"x": np.ones(2)})
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    w = SqliteDatasetWriter(path)
    w.write({"x": np.ones(2)})
    assert not path.exists(), "the file must appear only on close"
    w.close()
    w.close()
    assert len(SqliteDataset(path)) == 1
    with pytest.raises(DataError, match="writer is closed"):
        w.write({"x": np.ones(2)})


def test_writer_refuses_to_overwrite_unless_asked(tmp_path: Path) -> None:
    path = tmp_path / "o.db"
    _write(path, n=2)
    with pytest.raises(DataError, match="file exists; pass overwrite=True"):
        SqliteDatasetWriter(path)
    with SqliteDatasetWriter(path, overwrite=True) as w:
        w.write({"y": np.arange(3)}, split="test")
    assert len(SqliteDataset(path, "test")) == 1 and len(SqliteDataset(path, "train")) == 0


def test_writer_rejects_bad_input(tmp_path: Path) -> None:
    with SqliteDatasetWriter(tmp_path / "bad.db") as w:
        with pytest.raises(ValueError, match="non-empty string"):
            w.write({"x": np.ones(1)}, split="")
        with pytest.raises(TypeError, match="label must be None, int, float or str"):
            w.write({"x": np.ones(1)}, label=[1])
        with pytest.raises(TypeError, match="cannot be stored"):
            w.write({"x": np.array(["a"])})
        with pytest.raises(ValueError, match="non-empty mapping"):
            w.write({})


def test_wrong_schema_names_tables_and_columns(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE items (id INTEGER, name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(DataError, match=r"table 'items' expected columns \['id', 'split', 'label'\], "
                                        r"found columns \['id', 'name'\]"):
        SqliteDataset(path)


def test_missing_table_lists_tables_found(tmp_path: Path) -> None:
    path = tmp_path / "half.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, split TEXT, label)")
    conn.commit()
    conn.close()
    with pytest.raises(DataError, match=r"table 'arrays' expected columns .* found no such table "
                                        r"\(tables: \['items'\]\)"):
        SqliteDataset(path)


def test_not_a_database_and_missing_file(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(DataError, match="not a SQLite database"):
        SqliteDataset(junk)
    with pytest.raises(DataError, match="no such dataset file"):
        SqliteDataset(tmp_path / "absent.db")


def test_workers_read_the_same_batches(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    _write(path)
    ds = SqliteDataset(path).map(_image_and_label)
    serial = list(DataLoader(ds, batch_size=4, shuffle=True, seed=2))
    parallel = list(DataLoader(ds, batch_size=4, shuffle=True, seed=2, num_workers=2))
    assert len(serial) == len(parallel) == 3
    for (a_img, a_lab), (b_img, b_lab) in zip(serial, parallel):
        np.testing.assert_array_equal(a_img, b_img)
        np.testing.assert_array_equal(a_lab, b_lab)


def _image_and_label(item: SqliteItem) -> tuple[np.ndarray, int]:
    return item.arrays["image"], item.label
