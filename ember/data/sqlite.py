"""A dataset stored in one SQLite file: items of named NumPy arrays plus a label, tagged by split.

Schema (format "ember.sqlite_dataset", version 1):

    ember_meta(key, value)                          format and version
    items(id, split, label)                         one row per item, in write order
    arrays(item_id, name, dtype, shape, data)       one row per named array; data is C-order,
                                                    little-endian bytes; shape is JSON

Readers open the file read-only and lazily, one connection per process, so a `SqliteDataset` can
be pickled into `DataLoader` workers. Writers build a temporary file beside the target, commit
every `commit_every` items, and rename it into place on `close()`.

Example:
    >>> import numpy as np
    >>> with SqliteDatasetWriter("digits.db") as w:  # doctest: +SKIP
    ...     w.write({"image": np.zeros((28, 28), np.uint8)}, label=7, split="train")
    >>> SqliteDataset("digits.db", split="train")[0].label  # doctest: +SKIP
    7
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import ml_dtypes  # noqa: F401  (registers bfloat16 and friends with np.dtype, for stored dtype names)
import numpy as np

from ..atomic import temp_path, tidy
from .dataset import Dataset
from .errors import DataError

FORMAT = "ember.sqlite_dataset"
VERSION = "1"
SCHEMA: dict[str, list[str]] = {
    "items": ["id", "split", "label"],
    "arrays": ["item_id", "name", "dtype", "shape", "data"],
    "ember_meta": ["key", "value"],
}
_CREATE = """
CREATE TABLE ember_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE items (id INTEGER PRIMARY KEY, split TEXT NOT NULL, label);
CREATE TABLE arrays (
    item_id INTEGER NOT NULL REFERENCES items(id),
    name TEXT NOT NULL,
    dtype TEXT NOT NULL,
    shape TEXT NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (item_id, name)
);
CREATE INDEX items_by_split ON items(split, id);
"""


class SqliteItem(NamedTuple):
    """One stored item: its named arrays (in write order) and its label."""

    arrays: dict[str, np.ndarray]
    label: Any


class SqliteDataset(Dataset[SqliteItem]):
    """The items of one split (or all, with `split=None`) of a SQLite dataset file, in write order.

    Example:
        >>> ds = SqliteDataset("digits.db", split="test")  # doctest: +SKIP
        >>> item = ds[0]; item.arrays["image"].shape, item.label  # doctest: +SKIP
        ((28, 28), 3)
    """

    def __init__(self, path: str | os.PathLike[str], split: str | None = "train") -> None:
        self.path = Path(path)
        self.split = split
        self._local = threading.local()
        conn = self._connection()
        if split is None:
            rows = conn.execute("SELECT id FROM items ORDER BY id").fetchall()
        else:
            rows = conn.execute("SELECT id FROM items WHERE split = ? ORDER BY id", (split,)).fetchall()
        self._ids = np.array([r[0] for r in rows], dtype=np.int64)

    @staticmethod
    def splits(path: str | os.PathLike[str]) -> dict[str, int]:
        """Split names in the file with their item counts. Example: `{"test": 1000, "train": 4000}`."""
        conn = _open_readonly(Path(path))
        try:
            return dict(conn.execute("SELECT split, COUNT(*) FROM items GROUP BY split ORDER BY split"))
        finally:
            conn.close()

    def __len__(self) -> int:
        return len(self._ids)

    def get(self, i: int) -> SqliteItem:
        conn = self._connection()
        item_id = int(self._ids[i])
        (label,) = conn.execute("SELECT label FROM items WHERE id = ?", (item_id,)).fetchone()
        rows = conn.execute("SELECT name, dtype, shape, data FROM arrays WHERE item_id = ? ORDER BY rowid",
                            (item_id,))
        return SqliteItem({name: _decode(dtype, shape, data) for name, dtype, shape, data in rows}, label)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_local"]  # connections belong to one process; each worker opens its own
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"SqliteDataset({str(self.path)!r}, split={self.split!r}, len={len(self)})"

    def _connection(self) -> sqlite3.Connection:
        # One connection per thread and per process: a forked child must not reuse its parent's.
        conn, pid = getattr(self._local, "conn", None), getattr(self._local, "pid", None)
        if conn is None or pid != os.getpid():
            conn = _open_readonly(self.path)
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn


class SqliteDatasetWriter:
    """Write items to a new SQLite dataset file, committing every `commit_every` items.

    The file appears at `path` only when `close()` succeeds (or the `with` block ends without an
    exception); until then it is a temporary file in the same directory.

    Example:
        >>> import numpy as np
        >>> with SqliteDatasetWriter("pairs.db", overwrite=True) as w:  # doctest: +SKIP
        ...     for i in range(10):
        ...         w.write({"x": np.full(3, i, np.float32)}, label=i % 2, split="test" if i > 7 else "train")
    """

    def __init__(self, path: str | os.PathLike[str], overwrite: bool = False, commit_every: int = 1000) -> None:
        if commit_every < 1:
            raise ValueError(f"commit_every must be >= 1, got {commit_every}")
        self.path = Path(path)
        if self.path.exists() and not overwrite:
            raise DataError(f"{self.path}: file exists; pass overwrite=True to replace it")
        # A pid-tagged temporary name: ember.atomic.tidy removes it if this process is killed.
        self._tmp = temp_path(self.path)
        tidy(self._tmp.parent)
        self._conn = sqlite3.connect(self._tmp)
        self._conn.executescript(_CREATE)
        self._conn.executemany("INSERT INTO ember_meta VALUES (?, ?)", [("format", FORMAT), ("version", VERSION)])
        self._commit_every = commit_every
        self._pending = 0
        self._count = 0
        # A writer dropped without close() leaves nothing behind.
        self._finalizer = weakref.finalize(self, _discard, self._conn, self._tmp)

    def write(self, arrays: Mapping[str, Any], label: Any = None, split: str = "train") -> None:
        """Add one item: `arrays` maps names to array-likes; `label` is None, an int, float or str."""
        if not self._finalizer.alive:
            raise DataError(f"{self.path}: writer is closed")
        if not isinstance(split, str) or not split:
            raise ValueError(f"split must be a non-empty string such as 'train' or 'test', got {split!r}")
        if not isinstance(arrays, Mapping) or not arrays:
            raise ValueError("arrays must be a non-empty mapping of names to arrays")
        if isinstance(label, np.generic):
            label = label.item()
        if label is not None and not isinstance(label, (int, float, str)):
            raise TypeError(f"label must be None, int, float or str, got {type(label).__name__}")
        rows = [_encode(name, value) for name, value in arrays.items()]
        cur = self._conn.execute("INSERT INTO items (split, label) VALUES (?, ?)", (split, label))
        self._conn.executemany("INSERT INTO arrays VALUES (?, ?, ?, ?, ?)",
                               [(cur.lastrowid, *row) for row in rows])
        self._count += 1
        self._pending += 1
        if self._pending >= self._commit_every:
            self._conn.commit()
            self._pending = 0

    def __len__(self) -> int:
        return self._count

    def close(self) -> None:
        """Commit and move the finished file to `path`; calling it again does nothing."""
        if not self._finalizer.alive:
            return
        self._finalizer.detach()
        self._conn.commit()
        self._conn.close()
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        """Drop everything written; `path` is left as it was."""
        self._finalizer()

    def __enter__(self) -> SqliteDatasetWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _discard(conn: sqlite3.Connection, tmp: Path) -> None:
    conn.close()
    tmp.unlink(missing_ok=True)


def _encode(name: Any, value: Any) -> tuple[str, str, str, bytes]:
    if not isinstance(name, str) or not name:
        raise ValueError(f"array names must be non-empty strings, got {name!r}")
    arr = np.asarray(value)
    # ml_dtypes' types (bfloat16, float8, int4) have kind "V" like raw bytes, but round-trip by name.
    if arr.dtype.kind in "OUSVMm" and arr.dtype.type.__module__ != "ml_dtypes":
        raise TypeError(f"array {name!r} has dtype {arr.dtype}, which cannot be stored; use a numeric or bool dtype")
    little = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
    return name, arr.dtype.name, json.dumps(list(arr.shape)), np.ascontiguousarray(little).tobytes()


def _decode(dtype: str, shape: str, data: bytes) -> np.ndarray:
    arr = np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<")).reshape(json.loads(shape))
    return arr.astype(np.dtype(dtype), copy=True)


def _open_readonly(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise DataError(f"{path}: no such dataset file")
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, check_same_thread=False)
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        found = {t: [row[1] for row in conn.execute(f"PRAGMA table_info({t})")] for t in SCHEMA}
    except sqlite3.DatabaseError as exc:
        raise DataError(f"{path}: not a SQLite database ({exc})") from exc
    for table, expected in SCHEMA.items():
        if found[table] != expected:
            conn.close()
            what = f"columns {found[table]}" if found[table] else f"no such table (tables: {tables})"
            raise DataError(f"{path}: not an ember SQLite dataset: table {table!r} expected columns "
                            f"{expected}, found {what}")
    meta = dict(conn.execute("SELECT key, value FROM ember_meta"))
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        conn.close()
        raise DataError(f"{path}: expected format {FORMAT!r} version {VERSION}, found format "
                        f"{meta.get('format')!r} version {meta.get('version')!r}")
    return conn
