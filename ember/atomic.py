"""Atomic writes: a file or folder on disk is either the old one or the complete new one.

Every file ember writes (models, configs, checkpoints, metrics, caches, datasets) goes through here.
Files: the data goes to a temporary file in the destination's folder (same file system, so the
final `os.replace` is a rename the OS performs atomically); it is flushed and fsynced before the
rename, and removed if anything fails on the way.

Folders (`replace_folder`): the new folder is built complete under a temporary name, then swapped
with the old one in a single step, `renameat2(RENAME_EXCHANGE)` on Linux, and the old one (now
under the temporary name) is removed. Where the OS or file system cannot swap, the old folder is
renamed aside first, to the temporary name with `.old` for `.tmp`; a kill between that rename and
the next leaves no folder under the final name, and `tidy` puts the new one there.

Temporary names are `.<name>.<pid>.<12 hex digits>.tmp` (`.old` for an aside), so a process killed
midway leaves only hidden entries that say who made them. `tidy(folder)`, run by every atomic write
and by `ember.store.load` and checkpoint lookup in that folder, removes those whose process is gone,
and the older forms `.<name>.<12 hex digits>.tmp` (last modified before this process started),
`.tmp-<checkpoint>-<pid>` and `.old-<checkpoint>-<pid>`. Process ids are this machine's: on a folder
shared by several machines, a temporary entry of a live process on another one may be taken for a
dead one's.

Example:
    >>> with atomic_open("model.ember") as f:
    ...     f.write(b"...")
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import secrets
import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

__all__ = ["atomic_open", "write_atomic", "temp_path", "replace_folder", "tidy"]

# (pattern, how its new folder is named from an aside's name): ours, then older ember's checkpoint
# folders (only checkpoint names: a user's `.old-notes-12` is not ours).
_TEMPS = [
    (re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]{12}\.(?P<kind>tmp|old)$"), lambda n: n[:-3] + "tmp"),
    (re.compile(r"^\.(?P<kind>tmp|old)-(?P<name>epoch\d+-step\d+)-(?P<pid>\d+)$"), lambda n: ".tmp" + n[4:]),
]
# Older ember's temporary files carry no pid.
_LEGACY_TEMP = re.compile(r"^\..+\.[0-9a-f]{12}\.tmp$")
_STARTED = time.time()
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def temp_path(path: str | os.PathLike) -> Path:
    """A fresh temporary name beside `path`, for a write that ends in a rename onto `path`.

    Example:
        >>> temp_path("runs/a/model.ember").name  # doctest: +SKIP
        '.model.ember.4242.3f9a0c1d2e4b.tmp'
    """
    path = Path(os.path.abspath(path))
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")


@contextmanager
def atomic_open(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Open a binary file for writing that replaces `path` only when the `with` block succeeds.

    Example:
        >>> with atomic_open("weights.safetensors") as f:
        ...     f.write(header)
    """
    tmp = temp_path(path)
    tidy(tmp.parent)
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
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Replace `path` with `data` atomically.

    Example:
        >>> write_atomic("config.json", b"{}")
    """
    with atomic_open(path) as f:
        f.write(data)


def replace_folder(tmp: Path, final: Path) -> None:
    """Make the complete folder `tmp` (from `temp_path(final)`) be `final`, replacing any old `final`.

    At every instant either the old or the new folder is at `final`, except where the OS cannot swap
    folders (see the module docstring): there a kill at the wrong moment leaves both under hidden
    names and `tidy(final.parent)` moves the new one into place.

    Example:
        >>> tmp = temp_path("checkpoints/epoch0001-step00000010"); tmp.mkdir()  # doctest: +SKIP
        >>> replace_folder(tmp, Path("checkpoints/epoch0001-step00000010"))  # doctest: +SKIP
    """
    if not final.exists():
        os.replace(tmp, final)
        return
    if _exchange(tmp, final):
        shutil.rmtree(tmp, ignore_errors=True)
        return
    aside = tmp.with_name(tmp.name[:-len("tmp")] + "old")
    os.replace(final, aside)
    try:
        os.replace(tmp, final)
    except BaseException:
        os.replace(aside, final)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def tidy(folder: str | os.PathLike) -> None:
    """Finish or undo what atomic writes killed midway left in `folder`; leave live ones alone.

    A folder renamed aside by `replace_folder` whose final name is empty gets the new folder (its
    `.tmp`, complete by then) or, failing that, itself back; every other temporary entry of a dead
    process is removed. Entries that cannot be removed (a read-only folder) are left as they are.

    Example:
        >>> tidy("runs/mnist/checkpoints")
    """
    folder = Path(folder)
    try:
        names = os.listdir(folder)
    except OSError:
        return
    stale = [name for name in names if name[:1] == "." and _is_stale(folder / name)]  # ours are all hidden
    for name in stale:
        match, new_name = _match(name)
        if match and match["kind"] == "old" and not (folder / match["name"]).exists():
            new = folder / new_name(name)
            _try(os.replace, new if new.is_dir() else folder / name, folder / match["name"])
    for name in stale:
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            _try(path.unlink, missing_ok=True)


def _try(action: Callable[..., object], *args: object, **kwargs: object) -> None:
    try:
        action(*args, **kwargs)
    except OSError:
        pass  # a read-only or vanished entry: leave it


def _match(name: str) -> tuple[re.Match[str] | None, Callable[[str], str]]:
    for pattern, new_name in _TEMPS:
        match = pattern.match(name)
        if match:
            return match, new_name
    return None, str


def _is_stale(path: Path) -> bool:
    match, _ = _match(path.name)
    if match:
        return not _alive(int(match["pid"]))
    if _LEGACY_TEMP.match(path.name):
        try:
            return path.stat().st_mtime < _STARTED
        except OSError:
            return False
    return False


def _alive(pid: int) -> bool:
    if pid == os.getpid() or os.name == "nt":
        # Our own entries may be in use by another thread; on Windows os.kill(pid, 0) would kill it.
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _exchange(a: Path, b: Path) -> bool:
    """Swap the entries `a` and `b` in one step; False where this OS or file system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), os.fspath(a), None, os.fspath(b))
