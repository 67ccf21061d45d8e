"""The import contracts of pyproject.toml (`[tool.importlinter]`) hold: ember's layers import only the
layers below them, sibling modules form no cycle, and the generic part of fusion does not import the
cube (docs/architecture.md, "Layers"). Imports inside functions count.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_hold():
    run = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
                          "lint_imports_command()", "--no-cache", "--no-logo"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"lint-imports found a broken contract:\n{run.stdout}\n{run.stderr}"
    assert "0 broken" in run.stdout and "kept" in run.stdout, run.stdout
