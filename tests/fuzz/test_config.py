"""Damaged settings files (`ember.toml`) and `Config` JSON files: each either raises ConfigError
naming the file, or gives exactly the values the file holds (read by `tomllib` / `json`), all of
them keys and types the schema documents.
"""

from __future__ import annotations

import json
import tomllib
from typing import Literal, Optional

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ember.config import Config
from ember.errors import ConfigError
from ember.settings import SCHEMA
from ember.settings import load as load_settings

from .conftest import FUZZ, attempt
from .mutators import damaged, json_edit

TOML = b"""[autotune]
level = "extensive"
[memory]
page_size_mb = 16
free_after_s = 2.5
[fusion]
enabled = false
max_ops = 64
"""


def _documented(section: str, key: str, value) -> bool:
    """docs: a known key, a value of its type (an int may stand for a float) and among its choices."""
    spec = SCHEMA.get(section, {}).get(key)
    if spec is None or (isinstance(value, bool) and spec.type is not bool):
        return False
    if not (isinstance(value, spec.type) or (spec.type is float and isinstance(value, int))):
        return False
    return not spec.choices or value in spec.choices


@FUZZ
@given(data=st.data())
def test_damaged_settings_files(tmp_path, monkeypatch, data):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-user-config"))
    path = tmp_path / "ember.toml"
    path.write_bytes(data.draw(damaged(TOML)))
    got, _ = attempt(load_settings, tmp_path, {}, error=ConfigError, names=(path,))
    try:
        written = tomllib.loads(path.read_bytes().decode())
    except (ValueError, RecursionError):
        assert got is None, "ember read a file that is not TOML"
        return
    valid = all(s in SCHEMA and isinstance(table, dict) and all(_documented(s, k, v) for k, v in table.items())
                for s, table in written.items())
    assert (got is not None) == valid
    for section, table in written.items() if got is not None else ():
        for key, value in table.items():
            assert got.get(section, key) == value and type(got.get(section, key)) is SCHEMA[section][key].type
            assert got.source(section, key) == str(path)


class Optim(Config):
    lr: float = 0.1
    betas: tuple[float, float] = (0.9, 0.99)


class Model(Config):
    hidden: int
    kind: Literal["mlp", "cnn"] = "mlp"
    dropout: Optional[float] = None
    layers: Optional[list[int]] = None
    name: str = "m"
    bias: bool = True
    optim: Optional[Optim] = None


MODEL = Model(hidden=32, dropout=0.5, layers=[3, 4], optim=Optim(lr=0.01))


def _same(loaded, written) -> bool:
    """A loaded value equals the JSON value it came from: numbers by value (not bool for int),
    tuples as lists, nested configs as dicts."""
    if isinstance(loaded, Config):  # the keys written, each as loaded; the others keep their defaults
        return isinstance(written, dict) and set(written) <= set(loaded.__dataclass_fields__) and all(
            _same(getattr(loaded, k), v) for k, v in written.items())
    if isinstance(loaded, dict):
        return isinstance(written, dict) and loaded.keys() == written.keys() and all(
            _same(loaded[k], written[k]) for k in loaded)
    if isinstance(loaded, (list, tuple)):
        return isinstance(written, list) and len(loaded) == len(written) and all(map(_same, loaded, written))
    return loaded == written and isinstance(loaded, bool) == isinstance(written, bool)


@FUZZ
@given(data=st.data())
@pytest.mark.parametrize("level", ["bytes", "document"])
def test_damaged_config_files(tmp_path, level, data):
    path = tmp_path / "model.json"
    MODEL.save(path)
    if level == "bytes":
        path.write_bytes(data.draw(damaged(path.read_bytes())))
    else:
        path.write_text(json.dumps(data.draw(json_edit(json.loads(path.read_text())))[0]))
    got, _ = attempt(Model.load, path, error=ConfigError, names=(path,))
    if got is not None:
        assert _same(got, json.loads(path.read_bytes()))
