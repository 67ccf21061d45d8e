"""ember.toml and EMBER_* variables: precedence, validation errors naming key and file."""

import pytest

import ember
from ember.errors import ConfigError
from ember.settings import load


def write(path, text):
    path.write_text(text)
    return path


def test_defaults_when_nothing_is_set(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))
    s = load(cwd=tmp_path, environ={})
    assert s.get("autotune", "level") == "balanced"
    assert s.get("fusion", "enabled") is True
    assert s.source("fusion", "enabled") == "default"


def test_project_file_overrides_user_file_and_env_overrides_both(tmp_path, monkeypatch):
    user = tmp_path / "xdg" / "ember"
    user.mkdir(parents=True)
    write(user / "ember.toml", '[autotune]\nlevel = "minimal"\n[fusion]\nmax_ops = 8\n')
    project = tmp_path / "project"
    project.mkdir()
    write(project / "ember.toml", '[autotune]\nlevel = "full"\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    s = load(cwd=project, environ={})
    assert s.get("autotune", "level") == "full"
    assert s.get("fusion", "max_ops") == 8
    assert s.source("fusion", "max_ops").endswith("xdg/ember/ember.toml")
    s = load(cwd=project, environ={"EMBER_AUTOTUNE": "extensive", "EMBER_FUSION": "0"})
    assert s.get("autotune", "level") == "extensive"
    assert s.get("fusion", "enabled") is False
    assert s.source("autotune", "level") == "EMBER_AUTOTUNE"


@pytest.mark.parametrize("text, needle", [
    ("[autotune]\nspeed = 1\n", "unknown key 'speed' in [autotune]"),
    ("[turbo]\nx = 1\n", "unknown section [turbo]"),
    ("[fusion]\nmax_ops = \"many\"\n", "[fusion] max_ops: expected int"),
    ("[autotune]\nlevel = \"max\"\n", "'max' is not one of minimal, balanced, extensive, full"),
    ("[fusion\n", "not valid TOML"),
])
def test_bad_files_name_the_key_and_the_file(tmp_path, monkeypatch, text, needle):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))
    path = write(tmp_path / "ember.toml", text)
    with pytest.raises(ConfigError) as info:
        load(cwd=tmp_path, environ={})
    assert needle in str(info.value)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("env, needle", [
    ({"EMBER_FUSION": "maybe"}, "EMBER_FUSION: expected a boolean"),
    ({"EMBER_FUSION_MAX_OPS": "x"}, "EMBER_FUSION_MAX_OPS: expected int"),
    ({"EMBER_AUTOTUNE": "max"}, "EMBER_AUTOTUNE: 'max' is not one of"),
])
def test_bad_variables_are_named(tmp_path, monkeypatch, env, needle):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))
    with pytest.raises(ConfigError, match=needle):
        load(cwd=tmp_path, environ=env)


def test_device_default_reads_the_project_file(tmp_path, monkeypatch):
    monkeypatch.delenv("EMBER_DEVICE", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "ember.toml", '[device]\ndefault = "numpy"\n')
    from ember import settings
    settings.reload()
    try:
        assert ember.Device.default() is ember.Device.numpy()
        monkeypatch.setenv("EMBER_DEVICE", "cpu")
        assert ember.Device.default() is ember.Device.cpu()
    finally:
        monkeypatch.chdir("/")
        settings.reload()
