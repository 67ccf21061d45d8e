"""ember.atomic: temporary names, tidying what killed writes left, and single-file saves of
ember.store killed at every rename (the old file or the new one, whole, never a torn one)."""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ember import atomic
from ember.store import load, save
from kill_points import run_killed_at

needs_fork = pytest.mark.skipif(sys.platform == "win32", reason="kills a forked child")


def _hidden(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob(".*"))


def _dead_pid() -> int:
    child = mp.get_context("fork").Process(target=int)
    child.start()
    child.join()
    return child.pid


def test_temp_path_names_the_file_and_this_process(tmp_path):
    a, b = atomic.temp_path(tmp_path / "m.ember"), atomic.temp_path(tmp_path / "m.ember")
    assert a != b and a.parent == tmp_path
    assert a.name.startswith(f".m.ember.{os.getpid()}.") and a.name.endswith(".tmp")


@needs_fork
def test_tidy_removes_only_dead_processes_and_old_legacy_temporaries(tmp_path):
    dead, parent = _dead_pid(), os.getppid()
    names = {
        f".m.ember.{dead}.0123456789ab.tmp": False,        # a killed write: removed
        f".run.{dead}.0123456789ab.tmp/": False,           # a killed checkpoint folder: removed
        f".m.ember.{os.getpid()}.0123456789ab.tmp": True,  # ours, maybe in use by another thread
        f".m.ember.{parent}.0123456789ab.tmp": True,       # a live process's
        ".old.ember.ba9876543210.tmp": False,              # an older ember's, from before we started
        ".new.ember.ba9876543210.tmp": True,               # an older ember's, written since
        f".tmp-epoch0001-step00000007-{dead}/": False,      # an older ember's killed checkpoint
        f".old-notes-{dead}": True,                        # looks like one, but is no checkpoint
        ".gitignore": True, ".m.ember.notes": True, "m.ember": True,
    }
    for name in names:
        path = tmp_path / name.rstrip("/")
        if name.endswith("/"):
            path.mkdir()
            (path / "model.ember").write_bytes(b"x")
        else:
            path.write_bytes(b"x")
    past = time.time() - 3600
    os.utime(tmp_path / ".old.ember.ba9876543210.tmp", (past, past))
    atomic.tidy(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(n.rstrip("/") for n, keep in names.items() if keep)


@needs_fork
@pytest.mark.parametrize("style", ["ours", "older ember"])
def test_tidy_puts_back_a_folder_replacement_killed_between_its_renames(tmp_path, style):
    dead = _dead_pid()
    ck = "epoch0001-step00000007"
    names = {"ours": (f".{ck}.{dead}.0123456789ab.old", f".{ck}.{dead}.0123456789ab.tmp"),
             "older ember": (f".old-{ck}-{dead}", f".tmp-{ck}-{dead}")}[style]
    for has_new in (True, False):
        folder = tmp_path / str(has_new)
        folder.mkdir()
        aside = folder / names[0]
        aside.mkdir()
        (aside / "which").write_text("old")
        if has_new:
            (folder / names[1]).mkdir()
            (folder / names[1] / "which").write_text("new")
        atomic.tidy(folder)
        assert (folder / ck / "which").read_text() == ("new" if has_new else "old")
        assert _hidden(folder) == []


def test_replace_folder_swaps_whole_folders(tmp_path):
    final = tmp_path / "ck"
    for content in ("first", "second"):
        tmp = atomic.temp_path(final)
        tmp.mkdir()
        (tmp / "which").write_text(content)
        atomic.replace_folder(tmp, final)
        assert (final / "which").read_text() == content and _hidden(tmp_path) == []


@needs_fork
@pytest.mark.parametrize("name", ["m.ember", "m.safetensors"])
def test_a_save_killed_at_any_rename_leaves_the_old_or_the_new_file(tmp_path, name):
    rng = np.random.default_rng(1)
    old = {"w": rng.standard_normal((3, 7)).astype(np.float32), "b": np.arange(5, dtype=np.int64)}
    new = {"w": rng.standard_normal((2, 9)).astype(np.float16), "e": np.zeros((0, 3), np.float32)}
    seen = set()
    for n in range(1, 20):
        folder = tmp_path / str(n)
        folder.mkdir()
        save(folder / name, old)
        killed = run_killed_at(n, lambda: save(folder / name, new))
        got, _ = load(folder / name)
        which = [label for label, state in (("old", old), ("new", new)) if _same(got, state)]
        assert len(which) == 1, f"killed at rename event {n}: neither the old nor the new state"
        seen.add(which[0])
        assert _hidden(folder) == [], "loading removes the temporary file of the killed save"
        if killed:
            (folder / f".{name}.{_dead_pid()}.0123456789ab.tmp").write_bytes(b"x" * 100)
            save(folder / name, old)
            assert _hidden(folder) == [], "the next save removes it too"
        else:
            break
    assert seen == {"old", "new"} and n > 2, (n, seen)


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]) for k in a)
