"""The on-disk cache of compiled kernels: one shared library per key, written atomically.

The key is a hash of (IR hash, target and its version, compiler version, flags, launch shape baked
into the code); anything that changes the binary changes the key. A runtime can also find a binary
without tracing a kernel first: `source_stamp` hashes the Python source that tracing may run, and a
`SourceCache` entry under a key made before tracing names the binary (see docs/cube.md, "The runtime
and the cache"). The directory is the setting
`[compilation] cache_dir` (`EMBER_CACHE_DIR`, default `~/.cache/ember/kernels`).

Every entry carries a checksum of its bytes (`seal`: a trailer after a binary, a first line in a text
file), checked before the entry is used: a shared library that fails it is never loaded (a truncated or
bit-flipped `.so` would crash the process inside `dlopen` or at its first call). An entry that fails its
checksum, or that does not load, is deleted with a `RuntimeWarning` naming the file and rebuilt: the
cache can only cost time, never correctness. A library is checked once per process (while its file
stays the same), never per call. Library names carry `machine_stamp()`, so a folder shared by
machines with different processors never hands one the other's `-march=native` code.

Example:
    >>> cache = CompileCache()
    >>> lib = cache.load_or_build("3fa1...", build=lambda path: compile_to(path))
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import sys
import sysconfig
import tempfile
import types
import warnings
from pathlib import Path
from typing import Callable

from ..atomic import write_atomic
from ..settings import settings

FORMAT = 2
"""The layout of binary entries (2: the `seal` trailer), in their file names: entries of another layout
are misses, not damage."""

_SEAL = b"EMBERSUM"
_DIGEST = 32


def default_cache_dir() -> Path:
    """`[compilation] cache_dir` of the settings (`EMBER_CACHE_DIR`, default `~/.cache/ember/kernels`);
    a `ConfigError` when that path is a file."""
    return settings().directory("compilation", "cache_dir")


def seal(data: bytes) -> bytes:
    """`data` followed by a trailer holding its BLAKE2b checksum (what `unseal` checks). A shared
    library so sealed still loads: the loader reads what the ELF headers point at, not the file's end.

    Example:
        >>> unseal(seal(b"abc")) == b"abc"
        True
    """
    return data + _SEAL + hashlib.blake2b(data, digest_size=_DIGEST).digest()


def unseal(blob: bytes) -> bytes | None:
    """The data `seal` wrapped in `blob`, or None when the trailer is missing or the checksum fails
    (a truncated, damaged or foreign file).

    Example:
        >>> unseal(seal(b"abc")[:-1]) is None
        True
    """
    body = len(blob) - _DIGEST - len(_SEAL)
    if body < 0 or blob[body:-_DIGEST] != _SEAL:
        return None
    data, digest = blob[:body], blob[-_DIGEST:]
    return data if hashlib.blake2b(data, digest_size=_DIGEST).digest() == digest else None


def read_sealed(path: Path) -> bytes | None:
    """The checked data of the sealed entry at `path`; None when there is none, and None with a
    warning (the file deleted, so that a rebuild replaces it) when it fails its checksum."""
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    data = unseal(blob)
    if data is None:
        discard(path, f"fails its checksum ({len(blob)} bytes: truncated or damaged)")
    return data


def write_sealed(path: Path, data: bytes) -> None:
    """Write `data` sealed to `path`, atomically (temporary file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, seal(data))


def discard(path: Path, why: str) -> None:
    """Delete the damaged cache entry `path` with a `RuntimeWarning` saying `why`; it is rebuilt."""
    warnings.warn(f"kernel cache entry {path} {why}; deleted and rebuilt", RuntimeWarning, stacklevel=3)
    try:
        path.unlink()
    except OSError:
        pass


def cache_key(*parts: str) -> str:
    """A file-name-safe hash of everything that determines a binary."""
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:40]


class CompileCache:
    """Maps keys to loaded shared libraries, building them on a miss.

    `build(path)` must write a shared library to `path` (a temporary name in the cache directory); the
    cache seals it (`seal`) and writes it into place atomically, so concurrent processes never see half
    a file, and loads a library only once its checksum holds.
    """

    def __init__(self, directory: Path | str | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.hits = 0
        self.builds = 0

    def path(self, key: str) -> Path:
        """Where the library under `key` lives for this machine's processor (`machine_stamp`)."""
        return self.directory / f"{key}.{machine_stamp()}.{FORMAT}.so"

    def load(self, key: str, symbol: str) -> ctypes.CDLL | None:
        """The library under `key` when it exists, passes its checksum and loads (exporting `symbol`),
        else None; a damaged or unloadable file is deleted with a warning, so that a build replaces it."""
        path = self.path(key)
        lib = _loaded(path)
        if lib is None:
            if read_sealed(path) is None:
                return None
            lib = _try_load(path, symbol)
            if lib is None:
                discard(path, f"passes its checksum but does not load or lacks {symbol}")
                return None
        self.hits += 1
        return lib

    def load_or_build(self, key: str, build: Callable[[Path], None], symbol: str) -> ctypes.CDLL:
        """The library under `key`, built by `build(temporary_path)` and sealed into place on a miss."""
        lib = self.load(key, symbol)
        if lib is not None:
            return lib
        path = self.path(key)
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".so", dir=self.directory)
        os.close(fd)
        try:
            build(Path(tmp))
            write_sealed(path, Path(tmp).read_bytes())
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self.builds += 1
        lib = _try_load(path, symbol)
        if lib is None:
            raise OSError(f"the freshly built kernel {path} cannot be loaded")
        return lib


@functools.lru_cache(maxsize=None)
def machine_stamp() -> str:
    """A short hash of what this processor executes: its model and instruction-set extensions
    (`/proc/cpuinfo`'s first "model name" and "flags" or "Features" lines), else its architecture.
    Libraries are built with `-march=native`, so one built by another processor sharing the cache
    folder could stop on an illegal instruction: it is filed under another name.

    Example:
        >>> len(machine_stamp())
        8
    """
    seen: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                name, _, value = line.partition(":")
                name = name.strip()
                if name in ("model name", "flags", "Features"):
                    seen.setdefault(name, value.strip())
    except OSError:
        pass
    text = "\x00".join([platform.machine(), *(seen[k] for k in sorted(seen))])
    return hashlib.sha256(text.encode()).hexdigest()[:8]


_libraries: dict[str, tuple[tuple, ctypes.CDLL]] = {}  # path -> (its file's identity, the library)


def _identity(path: Path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _loaded(path: Path) -> ctypes.CDLL | None:
    """The library this process loaded from `path`, if the file there is still the one it checked."""
    entry = _libraries.get(str(path))
    return entry[1] if entry is not None and entry[0] == _identity(path) else None


def _try_load(path: Path, symbol: str) -> ctypes.CDLL | None:
    """`path` loaded (exporting `symbol`) and remembered for `_loaded`, else None. The caller has
    checked (or just written) the file."""
    identity = _identity(path)
    try:
        lib = ctypes.CDLL(str(path))
        getattr(lib, symbol)
    except (OSError, AttributeError):
        return None
    _libraries[str(path)] = (identity, lib)
    return lib


class SourceCache:
    """Generated kernel source by key, as text files under the cache directory (`<cache_dir>/<kind>`).

    Each file starts with a checksum line; a file that fails it (truncated, edited) is deleted with a
    warning and reads as a miss, so the cache can only cost time. Writes are atomic (temporary file +
    rename).

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
            blob = path.read_bytes()
        except OSError:
            return None
        head, _, text = blob.decode("utf-8", errors="replace").partition("\n")  # damage fails the checksum
        if head != _checksum(text):
            discard(path, "fails its checksum (truncated or edited)")
            return None
        self.hits += 1
        return text

    def write(self, key: str, text: str) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_atomic(self.directory / f"{key}.txt", f"{_checksum(text)}\n{text}".encode())
        except OSError:  # a read-only or full disk: the cache is an optimization only
            pass


def _checksum(text: str) -> str:
    return "// sha256 " + hashlib.sha256(text.encode()).hexdigest()


# ------------------------------------------------------------------------------------------------
# What tracing a kernel may run: keys made before tracing must change whenever that code changes.

_PACKAGE = Path(__file__).resolve().parents[1]  # the `ember` package
_LIBRARY_DIRS = tuple({str(Path(p).resolve()) for name, p in sysconfig.get_paths().items()
                       if name in ("stdlib", "platstdlib", "purelib", "platlib")})
_file_digests: dict = {}
_stamps: dict = {}


def _process_start() -> float:
    try:
        return os.stat(f"/proc/{os.getpid()}").st_ctime  # Linux: when this process started
    except OSError:
        import time
        return time.time()  # elsewhere: when ember got here, a little later


_STARTED = _process_start()


class SourceChanged(OSError):
    """A source file was modified after this process started: what it imported may differ from it."""


def _file_digest(path: str) -> bytes:
    digest = _file_digests.get(path)
    if digest is None:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_mtime >= _STARTED:
                raise SourceChanged(path)
            digest = _file_digests[path] = hashlib.sha256(f.read()).digest()
    return digest


def _package_stamp() -> str:
    stamp = _stamps.get(None)
    if stamp is None:
        h = hashlib.sha256(f"{platform.python_version()}\x00{np_version()}".encode())
        for path in sorted(str(p) for p in _PACKAGE.rglob("*.py")):
            h.update(path[len(str(_PACKAGE)):].encode() + b"\x00" + _file_digest(path))
        stamp = _stamps[None] = h.hexdigest()
    return stamp


def np_version() -> str:
    import numpy
    return numpy.__version__


def _outside_files(module: str) -> list | None:
    """The files of `module` and, transitively, of the modules its globals refer to (module objects,
    functions, classes, cube functions), outside the ember package and the Python libraries; None
    when one of them has no source file (an interactive `__main__`)."""
    seen, files, todo = set(), [], [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        mod = sys.modules.get(name)
        path = getattr(mod, "__file__", None)
        if mod is None or path is None:
            if name == module or name == "__main__":
                return None
            continue  # a builtin module
        path = str(Path(path).resolve())
        if path.startswith(str(_PACKAGE) + os.sep) or path.startswith(_LIBRARY_DIRS):
            continue
        files.append(path)
        for value in list(vars(mod).values()):
            if isinstance(value, types.ModuleType):
                todo.append(value.__name__)
            else:
                owner = getattr(getattr(value, "fn", value), "__module__", None)
                if isinstance(owner, str):
                    todo.append(owner)
    return sorted(files)


def source_stamp(module: str) -> str | None:
    """A hash of all Python source that tracing a kernel defined in `module` may run: every file of
    the ember package (frontend, passes, targets, kernel library, their helpers), plus, for a module
    outside it, that module's file and those of the non-library modules it refers to (transitively);
    with the Python and NumPy versions. None when some of that source cannot be read (a kernel typed
    into an interactive session) or was modified after this process started (the code it imported
    may be the older one, which the hash would not describe): such kernels are traced before every
    disk lookup. Computed once
    per module and process (hashing the package's source is cheap next to a trace).

    Example:
        >>> source_stamp("ember.kernels.elementwise") == source_stamp("ember.kernels.reduce")
        True
    """
    if module in _stamps:
        return _stamps[module]
    try:
        files = _outside_files(module)
        if files is None:
            stamp = None
        else:
            h = hashlib.sha256(_package_stamp().encode())
            for path in files:
                h.update(path.encode() + b"\x00" + _file_digest(path))
            stamp = h.hexdigest()
    except OSError:
        stamp = None
    _stamps[module] = stamp
    return stamp
