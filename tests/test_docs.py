"""README.md and every docs/*.md run: each file's code blocks execute in order in one namespace, in a
temporary folder, and every `print(...)  # value` comment states what the line really prints.

The convention for fenced blocks in those files, by the block's info string (the words after ```):

- ```python                  runs, after the file's earlier python blocks, in their namespace.
- ```python needs: cuda       runs where that device is found (`cuda`: a GPU, its driver and NVRTC;
                              `wgpu`: an adapter, unless EMBER_TEST_WGPU=0 as in tests/conftest.py);
                              elsewhere it does not, and the file's test ends skipped, naming the
                              block and what it needs, once the rest have passed.
- ```<lang> no-run: <reason>  never runs here by nature (a shell command, a signature sketch); the
                              reason is required. `<lang>` is any language (python, bash, ...).
- ``` or ```text              not code: a diagram, printed output, a file tree.
- `<!-- no-code: <reason> -->`  in the text of a file that has no code at all (a reference table).

Any other info string (```bash with no `no-run:`, ...) fails the test, as does a file with neither a
block that runs nor a marked one: code in the docs either runs or says why it cannot.
Each file keeps its run short (tiny models, one epoch on a few batches): CI runs all of them.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from ember.ops import registry as op_registry

ROOT = Path(__file__).resolve().parent.parent
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
NO_CODE = re.compile(r"<!-- no-code: \S.*? -->")
NEEDS = ("cuda", "wgpu")


@dataclass(frozen=True)
class Block:
    """One fenced block: its info string's language, its mark (`no-run: ...`, `needs: ...` or ""), its
    first line in the file and its body."""
    language: str
    mark: str
    line: int
    code: str

    @property
    def name(self) -> str:
        return f"line {self.line}"


def fenced_blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text, in order.

    Example:
        >>> fenced_blocks("text\\n```python needs: cuda\\nx = 1\\n```\\n")
        [Block(language='python', mark='needs: cuda', line=2, code='x = 1\\n')]
    """
    blocks = []
    for m in FENCE.finditer(text):
        language, _, mark = m.group(1).strip().partition(" ")
        blocks.append(Block(language, mark.strip(), text.count("\n", 0, m.start()) + 1, m.group(2)))
    return blocks


def promised_outputs(block: str) -> list[str]:
    """The values a block's `print(...)  # value` lines say they print, in order.

    Example:
        >>> promised_outputs("print(1 + 1)  # 2\\nx = 3  # not a print\\n")
        ['2']
    """
    return re.findall(r"^\s*print\(.*\)  # (.*)$", block, re.M)


def source_lines(block: Block) -> str:
    """The block's code placed at its own lines of the Markdown file, so that tracebacks point into
    the file and `inspect` (which `@cube.kernel` reads a kernel's source with) finds it there."""
    return "\n" * block.line + block.code


def unmet_need(block: Block) -> str | None:
    """Why `block` cannot run on this machine (its `needs:` device is missing), or None."""
    if not block.mark.startswith("needs:"):
        return None
    need = block.mark.removeprefix("needs:").strip()
    if need == "cuda":
        from ember.cube.runtime.cuda import cuda_available
        from ember.cube.runtime.nvrtc import nvrtc_available
        ok, why = next(((ok, why) for ok, why in (cuda_available(), nvrtc_available()) if not ok), (True, ""))
    elif os.environ.get("EMBER_TEST_WGPU", "1") == "0":
        ok, why = False, "EMBER_TEST_WGPU=0"
    else:
        from ember.cube.runtime.wgpu import wgpu_available
        ok, why = wgpu_available()
    return None if ok else why


def check_marks(name: str, text: str) -> list[Block]:
    """The blocks of Markdown `text` (file `name`), once each is checked to be python, text or marked
    (with a known need or a reason) and the file has code or says it has none."""
    blocks = fenced_blocks(text)
    for b in blocks:
        where = f"{name} {b.name}"
        if b.mark.startswith("no-run:"):
            assert b.mark.removeprefix("no-run:").strip(), f"{where}: `no-run:` needs a reason"
        elif b.mark.startswith("needs:"):
            assert b.language == "python" and b.mark.removeprefix("needs:").strip() in NEEDS, (
                f"{where}: `needs:` takes one of {NEEDS} on a python block, got {b.language!r} {b.mark!r}")
        else:
            assert not b.mark and b.language in ("python", "text", ""), (
                f"{where}: a ```{b.language} {b.mark} block must run (```python) or say why not "
                f"(```{b.language} no-run: <reason>); see tests/test_docs.py")
    assert any(b.language == "python" or b.mark for b in blocks) or NO_CODE.search(text), (
        f"{name} has no code block that runs, none marked no-run or needs:, and no <!-- no-code: -->")
    return blocks


def run_blocks(path: Path, blocks: list[Block], monkeypatch) -> list[str]:
    """Run the file's runnable python blocks in order in one namespace; the blocks left out for an
    unmet need, with the reason."""
    # A registered module, because dataclasses (Config) look their class's module up in sys.modules.
    module = types.ModuleType(f"docs_{path.stem}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    left_out = []
    for b in blocks:
        if b.language != "python" or b.mark.startswith("no-run:"):
            continue
        why = unmet_need(b)
        if why is not None:
            left_out.append(f"{path.name} {b.name} ({b.mark}: {why})")
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(source_lines(b), str(path), "exec"), module.__dict__)
        printed = out.getvalue().splitlines()
        promised = promised_outputs(b.code)
        assert [line for line in printed if line in promised] == promised, (
            f"{path.name} {b.name} promised {promised}, printed {printed}")
    return left_out


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_code_blocks_run_and_print_what_they_say(path, tmp_path, monkeypatch):
    blocks = check_marks(path.name, path.read_text())
    monkeypatch.chdir(tmp_path)
    # the ops a file's examples register (docs/extension.md's custom ops) go with the test, so a file run
    # again in one process (a rerun, another test's copy) does not meet its own ops as taken names
    before = set(op_registry)
    try:
        left_out = run_blocks(path, blocks, monkeypatch)
    finally:
        for name in set(op_registry) - before:  # the examples' own ops, not those of ember modules imported
            extension = getattr(op_registry[name].reference, "__self__", None)
            if not getattr(getattr(extension, "forward", None), "__module__", "ember").startswith("ember"):
                del op_registry[name]
    if left_out:
        pytest.skip("not run here: " + "; ".join(left_out))


@pytest.mark.parametrize("text, error", [
    ("```bash\nls\n```\n", "must run"),
    ("```bash no-run:\nls\n```\n", "needs a reason"),
    ("```python needs: tpu\nx = 1\n```\n", "takes one of"),
    ("```text\na diagram\n```\n", "no code block"),
    ("a table\n", "no code block"),
])
def test_unmarked_code_is_refused(text, error):
    with pytest.raises(AssertionError, match=error):
        check_marks("x.md", text)


def test_a_wrong_promise_fails(tmp_path, monkeypatch):
    doc = tmp_path / "x.md"
    doc.write_text("```python\nx = 2\n```\n\n```python\nprint(x + 1)  # 4\n```\n")
    with pytest.raises(AssertionError, match=r"x.md line 5 promised \['4'\], printed \['3'\]"):
        run_blocks(doc, fenced_blocks(doc.read_text()), monkeypatch)


def test_marked_code_is_accepted():
    text = "```bash no-run: a shell\nls\n```\n```python needs: wgpu\nx = 1\n```\n```\ndiagram\n```\n"
    assert [b.mark for b in check_marks("x.md", text)] == ["no-run: a shell", "needs: wgpu", ""]
    assert check_marks("x.md", "a table\n<!-- no-code: a reference table -->\n") == []


def test_ci_runs_the_readme_test_command():
    """.ci/run runs README.md's "Run the tests" command verbatim."""
    readme = fenced_blocks((ROOT / "README.md").read_text())
    command = next(b.code.strip() for b in readme if "pytest" in b.code)
    assert command in (ROOT / ".ci" / "run").read_text().splitlines()


def test_models_guide_keeps_its_checks():
    """docs/models.md shows what its code prints; the runs above check each value."""
    blocks = [b for b in fenced_blocks((ROOT / "docs" / "models.md").read_text()) if b.language == "python"]
    assert len(blocks) >= 6 and sum(len(promised_outputs(b.code)) for b in blocks) >= 8
