"""Run-time settings: `ember.toml` files and `EMBER_*` environment variables.

Strongest first: the variable, `./ember.toml`, `~/.config/ember/ember.toml` (`$XDG_CONFIG_HOME`
honoured), the default. An unknown key or a wrong type raises `ConfigError` naming key and file.

| section        | key            | variable              | default                    |
|----------------|----------------|-----------------------|----------------------------|
| `[device]`     | `default`      | `EMBER_DEVICE`        | best available             |
| `[autotune]`   | `level`        | `EMBER_AUTOTUNE`      | `balanced`                 |
| `[autotune]`   | `cache_dir`    | `EMBER_AUTOTUNE_DIR`  | `~/.cache/ember/autotune`  |
| `[compilation]`| `cache_dir`    | `EMBER_CACHE_DIR`     | `~/.cache/ember/kernels`   |
| `[compilation]`| `compiler`     | `EMBER_CC`            | `cc` (gcc or clang)        |
| `[memory]`     | `page_size_mb` | `EMBER_PAGE_SIZE_MB`  | `0` (adaptive)             |
| `[memory]`     | `free_after_s` | `EMBER_FREE_AFTER_S`  | `30.0`                     |
| `[cpu]`        | `parallel_min` | `EMBER_CPU_PARALLEL_MIN` | `0` (measured: cpu.py)  |
| `[fusion]`     | `enabled`      | `EMBER_FUSION`        | `true`                     |
| `[fusion]`     | `max_ops`      | `EMBER_FUSION_MAX_OPS`| `256`                      |
| `[cuda]`       | `allow_tf32`   | `EMBER_ALLOW_TF32`    | `false` (f32 matmul in f32)|
| `[cuda]`       | `graphs`       | `EMBER_CUDA_GRAPHS`   | `true` (plan replay as graphs)|
| `[logging]`    | `level`        | `EMBER_LOG`           | `warning`                  |
| `[logging]`    | `debug_kernels`| `EMBER_DEBUG_KERNELS` | `false`                    |

Example:
    >>> settings().get("autotune", "level")
    'balanced'
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import as_float
from .errors import ConfigError, brief


@dataclass(frozen=True)
class Key:
    """One setting: its type, default, environment variable and allowed values."""

    type: type
    default: Any
    env: str
    choices: tuple = ()


SCHEMA: dict[str, dict[str, Key]] = {
    "device": {"default": Key(str, "", "EMBER_DEVICE")},
    "autotune": {
        "level": Key(str, "balanced", "EMBER_AUTOTUNE", ("minimal", "balanced", "extensive", "full")),
        "cache_dir": Key(str, "~/.cache/ember/autotune", "EMBER_AUTOTUNE_DIR"),
    },
    "compilation": {
        "cache_dir": Key(str, "~/.cache/ember/kernels", "EMBER_CACHE_DIR"),
        "compiler": Key(str, "cc", "EMBER_CC"),
    },
    "memory": {
        "page_size_mb": Key(int, 0, "EMBER_PAGE_SIZE_MB"),
        "free_after_s": Key(float, 30.0, "EMBER_FREE_AFTER_S"),
    },
    "cpu": {"parallel_min": Key(int, 0, "EMBER_CPU_PARALLEL_MIN")},
    "fusion": {
        "enabled": Key(bool, True, "EMBER_FUSION"),
        "max_ops": Key(int, 256, "EMBER_FUSION_MAX_OPS"),
    },
    "cuda": {
        "allow_tf32": Key(bool, False, "EMBER_ALLOW_TF32"),
        "graphs": Key(bool, True, "EMBER_CUDA_GRAPHS"),
    },
    "logging": {
        "level": Key(str, "warning", "EMBER_LOG", ("debug", "info", "warning", "error")),
        "debug_kernels": Key(bool, False, "EMBER_DEBUG_KERNELS"),
    },
}


class Settings:
    """The settings in force, with where each came from."""

    def __init__(self, values: dict[tuple[str, str], Any], sources: dict[tuple[str, str], str]) -> None:
        self._values = values
        self._sources = sources

    def get(self, section: str, key: str) -> Any:
        """The value of `[section] key`."""
        if (section, key) not in self._values:
            raise ConfigError(f"unknown setting [{section}] {key}; known: {_known()}")
        return self._values[(section, key)]

    def directory(self, section: str, key: str) -> Path:
        """The folder `[section] key` names, `~` expanded; a `ConfigError` naming the setting, where it
        came from and the path when that path (or a folder above it) is a file, which no folder can be
        made in.

        Example:
            >>> settings().directory("compilation", "cache_dir").name
            'kernels'
        """
        path = Path(self.get(section, key)).expanduser()
        for above in (path, *path.parents):
            if above.exists() or above.is_symlink():
                if not above.is_dir():
                    what = "is a file" if above == path else f"is inside {above}, which is a file"
                    raise ConfigError(f"[{section}] {key} (from {self.origin(section, key)}) must name "
                                      f"a folder, but {path} {what}")
                break
        return path

    def source(self, section: str, key: str) -> str:
        """Where the value came from: a file path, an environment variable, or `default`."""
        return self._sources[(section, key)]

    def origin(self, section: str, key: str) -> str:
        """Where the value came from, in words: "environment variable EMBER_...", a file, "the default"."""
        source = self.source(section, key)
        if source == SCHEMA[section][key].env:
            return f"environment variable {source}"
        return "the default" if source == "default" else source

    def items(self):
        """((section, key), value, source) for every setting."""
        for k, v in self._values.items():
            yield k, v, self._sources[k]


def config_files(cwd: str | os.PathLike | None = None) -> list[Path]:
    """The files read, weakest first: the user's, then the project's (those that exist)."""
    user_dir = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "ember"
    candidates = [user_dir / "ember.toml", Path(cwd or os.getcwd()) / "ember.toml"]
    return [p for p in candidates if p.is_file()]


def load(cwd: str | os.PathLike | None = None, environ: dict | None = None) -> Settings:
    """Read the settings from files and the environment (see the module docs)."""
    environ = os.environ if environ is None else environ
    values = {(s, k): key.default for s, keys in SCHEMA.items() for k, key in keys.items()}
    sources = {sk: "default" for sk in values}
    for path in config_files(cwd):
        for (section, key), value in _read_file(path).items():
            values[(section, key)] = value
            sources[(section, key)] = str(path)
    for section, keys in SCHEMA.items():
        for name, key in keys.items():
            if key.env in environ and environ[key.env] != "":
                values[(section, name)] = _parse_env(key, environ[key.env])
                sources[(section, name)] = key.env
    return Settings(values, sources)


_cached: Settings | None = None


def settings() -> Settings:
    """The settings of this process (read once; `reload()` reads again)."""
    global _cached
    if _cached is None:
        _cached = load()
    return _cached


def reload() -> Settings:
    """Read the files and environment again (after changing them)."""
    global _cached
    _cached = load()
    return _cached


def _known() -> str:
    return ", ".join(f"[{s}] {k}" for s, keys in SCHEMA.items() for k in keys)


def _read_file(path: Path) -> dict[tuple[str, str], Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise ConfigError(f"{path}: reading ember.toml on Python 3.10 needs `pip install tomli`") from None
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except RecursionError:
        raise ConfigError(f"{path}: not valid TOML (nested too deeply)") from None
    except ValueError as e:  # TOMLDecodeError, invalid UTF-8, an integer past Python's 4300-digit limit
        raise ConfigError(f"{path}: not valid TOML ({str(e)[:200]})") from None
    out = {}
    for section, table in data.items():
        if section not in SCHEMA:
            raise ConfigError(f"{path}: unknown section [{section[:60]}]; known: {', '.join(SCHEMA)}")
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: [{section}] must be a table")
        for name, value in table.items():
            if name not in SCHEMA[section]:
                raise ConfigError(f"{path}: unknown key {brief(name)} in [{section}]; known: "
                                  f"{', '.join(SCHEMA[section])}")
            out[(section, name)] = _check(SCHEMA[section][name], value, f"{path}: [{section}] {name}")
    return out


def _check(key: Key, value: Any, where: str) -> Any:
    ok = isinstance(value, key.type) and not (key.type is not bool and isinstance(value, bool))
    if key.type is float and as_float(value) is not None:
        value, ok = as_float(value), True
    if not ok:
        raise ConfigError(f"{where}: expected {key.type.__name__}, got {brief(value)}")
    if key.choices and value not in key.choices:
        raise ConfigError(f"{where}: {brief(value)} is not one of {', '.join(key.choices)}")
    return value


def _parse_env(key: Key, text: str) -> Any:
    where = f"environment variable {key.env}"
    if key.type is bool:
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{where}: expected a boolean (1/0, true/false), got {brief(text)}")
    try:
        value = key.type(text)
    except ValueError:
        raise ConfigError(f"{where}: expected {key.type.__name__}, got {brief(text)}") from None
    return _check(key, value, where)
