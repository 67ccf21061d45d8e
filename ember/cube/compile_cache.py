"""The on-disk cache of compiled kernels: one shared library per key, written atomically.

The key is a hash of (IR hash, target and its version, compiler version, flags, launch shape baked
into the code); anything that changes the binary changes the key. The directory is the setting
`[compilation] cache_dir` (`EMBER_CACHE_DIR`, default `~/.cache/ember/kernels`). A file that cannot be loaded (truncated, corrupt, from another machine)
is deleted and rebuilt: the cache can only cost time, never correctness.

Example:
    >>> cache = CompileCache()
    >>> lib = cache.load_or_build("3fa1...", build=lambda path: compile_to(path))
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Callable

from ..settings import settings


def default_cache_dir() -> Path:
    """`[compilation] cache_dir` of the settings (`EMBER_CACHE_DIR`, default `~/.cache/ember/kernels`)."""
    return Path(settings().get("compilation", "cache_dir")).expanduser()


def cache_key(*parts: str) -> str:
    """A file-name-safe hash of everything that determines a binary."""
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:40]


class CompileCache:
    """Maps keys to loaded shared libraries, building them on a miss.

    `build(path)` must write a shared library to `path` (a temporary name in the cache directory);
    the cache then renames it into place, so concurrent processes never see half a file.
    """

    def __init__(self, directory: Path | str | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.hits = 0
        self.builds = 0

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.so"

    def load_or_build(self, key: str, build: Callable[[Path], None], symbol: str) -> ctypes.CDLL:
        path = self.path(key)
        if path.exists():
            lib = _try_load(path, symbol)
            if lib is not None:
                self.hits += 1
                return lib
            try:  # unloadable: remove it and fall through to a rebuild
                path.unlink()
            except OSError:
                pass
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".so", dir=self.directory)
        os.close(fd)
        try:
            build(Path(tmp))
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self.builds += 1
        lib = _try_load(path, symbol)
        if lib is None:
            raise OSError(f"the freshly built kernel {path} cannot be loaded")
        return lib


def _try_load(path: Path, symbol: str) -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL(str(path))
        getattr(lib, symbol)
        return lib
    except (OSError, AttributeError):
        return None


class SourceCache:
    """Generated kernel source by key, as text files under the cache directory (`<cache_dir>/<kind>`).

    Each file starts with a checksum line; a file that fails it (truncated, edited) is deleted and
    reads as a miss, so the cache can only cost time. Writes are atomic (temporary file + rename).

    Example:
        >>> cache = SourceCache("wgsl")
        >>> cache.write("3fa1...", source); cache.read("3fa1...") == source
        True
    """

    def __init__(self, kind: str, directory: Path | str | None = None) -> None:
        self.directory = (Path(directory) if directory is not None else default_cache_dir()) / kind
        self.hits = 0

    def read(self, key: str) -> str | None:
        path = self.directory / f"{key}.txt"
        try:
            head, _, text = path.read_text().partition("\n")
        except (OSError, UnicodeDecodeError):
            return None
        if head != _checksum(text):
            path.unlink(missing_ok=True)
            return None
        self.hits += 1
        return text

    def write(self, key: str, text: str) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".txt", dir=self.directory)
            with os.fdopen(fd, "w") as f:
                f.write(f"{_checksum(text)}\n{text}")
            os.replace(tmp, self.directory / f"{key}.txt")
        except OSError:  # a read-only or full disk: the cache is an optimization only
            pass


def _checksum(text: str) -> str:
    return "// sha256 " + hashlib.sha256(text.encode()).hexdigest()
