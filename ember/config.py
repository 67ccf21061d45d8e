"""`Config`: model and training settings as dataclasses that save to and load from JSON (Burn's Config).

Subclasses are made dataclasses automatically. Field values are checked against their annotations
(int, float, str, bool, None-able, Literal, lists, tuples, dicts and nested configs) when built and when loaded;
an error names the field and what was expected. Files are written atomically.

Example:
    >>> class MLPConfig(Config):
    ...     hidden: int = 512
    ...     dropout: float = 0.1
    >>> MLPConfig(hidden=256).save("mlp.json")
    >>> MLPConfig.load("mlp.json").hidden
    256
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
from typing import Any

from .atomic import write_atomic
from .errors import ConfigError, brief


class Config:
    """Base class of settings dataclasses (see the module docs)."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "__dataclass_fields__" not in cls.__dict__:
            dataclasses.dataclass(cls)

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            setattr(self, field.name, _check(type(self).__name__, field.name, value, hints[field.name]))

    def to_dict(self) -> dict:
        """The settings as a JSON-ready dict (nested configs become dicts)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Config":
        """Build from a dict; unknown keys and missing required fields raise `ConfigError`."""
        if not isinstance(data, dict):
            raise ConfigError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"{cls.__name__}: unknown field(s) {brief(unknown)}; known: {sorted(names)}")
        required = [f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        missing = [n for n in required if n not in data]
        if missing:
            raise ConfigError(f"{cls.__name__}: missing required field(s) {missing}")
        return cls(**data)

    def save(self, path: str | os.PathLike) -> None:
        """Write the config as JSON (atomically)."""
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True)
        write_atomic(path, text.encode())

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Config":
        """Read a config written by `save`; a bad file raises `ConfigError` naming the file."""
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except RecursionError:
            raise ConfigError(f"{path}: not valid JSON (nested too deeply)") from None
        except ValueError as e:  # JSONDecodeError, invalid UTF-8, an integer past Python's 4300-digit limit
            raise ConfigError(f"{path}: not valid JSON ({str(e)[:200]})") from None
        try:
            return cls.from_dict(data)
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from None


def as_float(value: Any) -> float | None:
    """`value` as a float if it is a float, or an int a float holds exactly (2**53 + 1 is not); else None.

    Example:
        >>> as_float(3), as_float(2**53 + 1), as_float(True)
        (3.0, None, None)
    """
    if isinstance(value, float):
        return value
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    try:
        exact = float(value)
    except OverflowError:
        return None
    return exact if int(exact) == value else None


def _check(owner: str, name: str, value: Any, hint: Any) -> Any:
    """`value` checked against the annotation `hint` (nested configs built from dicts)."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if value is None and len(options) < len(args):
            return value
        if len(options) == 1:
            # Optional[X]: X's own, more specific error (a nested config's unknown key, say).
            return _check(owner, name, value, options[0])
        for option in options:
            try:
                return _check(owner, name, value, option)
            except ConfigError:
                continue
        raise ConfigError(f"{owner}.{name}: expected {hint}, got {brief(value)}")
    if hint is type(None):
        if value is None:
            return value
        raise ConfigError(f"{owner}.{name}: expected None, got {brief(value)}")
    if isinstance(hint, type) and issubclass(hint, Config):
        if isinstance(value, dict):
            return hint.from_dict(value)
        if isinstance(value, hint):
            return value
        raise ConfigError(f"{owner}.{name}: expected a {hint.__name__} or a dict, got {brief(value)}")
    if origin is typing.Literal:
        if value in args:
            return value
        raise ConfigError(f"{owner}.{name}: expected one of {list(args)}, got {brief(value)}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{owner}.{name}: expected a list, got {brief(value)}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            # tuple[int, str]: a fixed length, one type per position.
            if len(value) != len(args):
                raise ConfigError(f"{owner}.{name}: expected {len(args)} items, got {brief(value)}")
            return tuple(_check(owner, name, v, t) for v, t in zip(value, args))
        inner = args[0] if args else Any
        items = [_check(owner, name, v, inner) for v in value]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{owner}.{name}: expected a dict, got {brief(value)}")
        if not args:
            return value
        return {_check(owner, name, k, args[0]): _check(owner, name, v, args[1]) for k, v in value.items()}
    if hint is float:
        exact = as_float(value)
        if exact is not None:
            return exact
        raise ConfigError(f"{owner}.{name}: expected a float, got {brief(value)}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{owner}.{name}: expected an int, got {brief(value)}")
    if isinstance(hint, type):
        if isinstance(value, hint):
            return value
        raise ConfigError(f"{owner}.{name}: expected {hint.__name__}, got {brief(value)}")
    return value
