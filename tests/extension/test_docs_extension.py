"""docs/extension.md runs: its python block defines a custom op and prints what its comment says, on the
cube device (the kernel) and on Device.numpy() (the reference)."""

from __future__ import annotations

import contextlib
import io
import re
import runpy
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "extension.md"


def test_the_guide_example_runs_and_prints_what_it_says(tmp_path):
    block = re.findall(r"^```python\n(.*?)^```", GUIDE.read_text(), re.S | re.M)[0]  # the guide's first example
    promised = re.search(r"print\(.*\)\s+# (.*)$", block, re.M).group(1)
    script = tmp_path / "docs_extension.py"  # a file, since cube kernels are parsed from their source
    script.write_text(block)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(str(script))
    assert out.getvalue().splitlines() == [promised, promised]
