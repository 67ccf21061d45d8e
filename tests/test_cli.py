"""The `ember` command line: help, version, `info` as text and JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import ember
from ember import cli


def test_help_lists_the_commands(capsys):
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    assert "usage: ember" in out and "info" in out
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0


def test_version(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert capsys.readouterr().out.strip() == f"ember {ember.__version__}"


def test_info_text(capsys, monkeypatch):
    monkeypatch.delenv("EMBER_DEVICE", raising=False)
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"ember {ember.__version__}")
    assert f"cpu      backend {ember.Device.cpu().backend.name}  (default)" in out  # cube-cpu, or its wrapper
    assert "numpy    backend numpy\n" in out
    assert "cuda:0   unavailable: Device(\"cuda:0\") is unavailable" in out  # the reason depends on the extras
    assert "autotune.level" in out and "balanced" in out
    for name in ("torch", "rich", "matplotlib", "Pillow", "safetensors", "tinygrad", "cuda-bindings", "wgpu"):
        assert f"\n  {name} " in out


def test_info_json_reports_devices_settings_and_extras(capsys, monkeypatch):
    monkeypatch.setenv("EMBER_AUTOTUNE", "minimal")
    assert cli.main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    usable = [d["device"] for d in data["devices"] if d["available"]]
    assert usable[0] == "cpu" and usable[-1] == "numpy"  # wgpu adapters between, where wgpu is here
    assert all("Vulkan" in d["adapter"] or "OpenGL" in d["adapter"] or "Metal" in d["adapter"]
               or "D3D12" in d["adapter"] for d in data["devices"] if d["device"].startswith("wgpu") and d["available"])
    assert data["settings"]["values"]["autotune.level"] == {"value": "minimal", "source": "EMBER_AUTOTUNE"}
    extras = {e["name"]: e for e in data["extras"]}
    import numpy
    assert extras["rich"]["installed"] is True and extras["rich"]["version"]
    assert all(e["version"] is None for e in data["extras"] if not e["installed"])
    assert data["numpy"] == numpy.__version__


def test_missing_extras_are_reported_missing(monkeypatch):
    monkeypatch.setattr(cli, "EXTRAS", (("nothing-here", ("nothing-here",), "ember_no_such_module"),))
    assert cli.extras() == [{"name": "nothing-here", "installed": False, "version": None}]


def test_a_bad_setting_is_shown_not_raised(capsys, monkeypatch):
    monkeypatch.setenv("EMBER_AUTOTUNE", "ludicrous")
    assert cli.main(["info"]) == 0
    assert "error:" in capsys.readouterr().out


def test_module_entry_point():
    done = subprocess.run([sys.executable, "-m", "ember.cli", "--version"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == f"ember {ember.__version__}"
