"""docs/models.md runs: its python code blocks execute in order in one namespace, and every
`print(...)  # value` comment in them states what the line really prints."""

from __future__ import annotations

import contextlib
import io
import re
import sys
import types
from pathlib import Path

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "models.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(text: str) -> list[str]:
    """The bodies of the ```python fenced blocks of a Markdown text, in order.

    Example:
        >>> python_blocks("```python\\nx = 1\\n```\\n")
        ['x = 1\\n']
    """
    return BLOCK.findall(text)


def promised_outputs(block: str) -> list[str]:
    """The values a block's `print(...)  # value` lines say they print, in order.

    Example:
        >>> promised_outputs("print(1 + 1)  # 2\\nx = 3  # not a print\\n")
        ['2']
    """
    return re.findall(r"^\s*print\(.*\)  # (.*)$", block, re.M)


def test_guide_code_runs_and_prints_what_it_says(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(GUIDE.read_text())
    assert len(blocks) >= 6
    # A registered module, because dataclasses (Config) look their class's module up in sys.modules.
    guide = types.ModuleType("docs_models")
    monkeypatch.setitem(sys.modules, guide.__name__, guide)
    namespace = guide.__dict__
    for i, block in enumerate(blocks):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, f"{GUIDE.name} block {i}", "exec"), namespace)
        printed = out.getvalue().splitlines()
        promised = promised_outputs(block)
        assert [line for line in printed if line in promised] == promised, (
            f"block {i} promised {promised}, printed {printed}")
