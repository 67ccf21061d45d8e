"""Atomic file writes: a file on disk is either the old one or the complete new one.

Every file ember writes (models, configs, checkpoints, metrics, caches) goes through here.

The data goes to a temporary file in the destination's folder (same file system, so the final
`os.replace` is a rename the OS performs atomically); it is flushed and fsynced before the rename, and
removed if anything fails on the way.

Example:
    >>> with atomic_open("model.ember") as f:
    ...     f.write(b"...")
"""

from __future__ import annotations

import os
import secrets
from contextlib import contextmanager
from typing import BinaryIO, Iterator

__all__ = ["atomic_open", "write_atomic"]


@contextmanager
def atomic_open(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Open a binary file for writing that replaces `path` only when the `with` block succeeds.

    Example:
        >>> with atomic_open("weights.safetensors") as f:
        ...     f.write(header)
    """
    path = os.fspath(path)
    folder, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(folder, f".{name}.{secrets.token_hex(6)}.tmp")
    # os.open with mode 0o666 lets the umask decide the permissions, as a plain open() would;
    # tempfile.mkstemp would leave the finished file readable by its owner only.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Replace `path` with `data` atomically.

    Example:
        >>> write_atomic("config.json", b"{}")
    """
    with atomic_open(path) as f:
        f.write(data)
