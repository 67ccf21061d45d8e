"""Autotune: the fastest candidate wins, decisions persist across restarts, corrupt caches rebuild.

No test here depends on real timing: a fake timer gives each candidate its cost.
"""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ember import settings
from ember.cube.runtime.autotune import LEVELS, AutotuneCache, Autotuner, anchor, device_cache

COST = {"slow": 3.0, "fast": 1.0, "fastest": 0.5}


def fake_timer(timed):
    """A timer that records which candidates were timed and reports their cost from COST."""
    def timer(name, run):
        timed.append(name)
        run()
        return COST[name]
    return timer


def candidates(calls, names=("slow", "fast")):
    def make(name):
        def fn(n):
            calls.append(name)
            return n + 1
        return fn
    return {name: make(name) for name in names}


def tuner(calls, timed, cache=None, level="balanced", **kw):
    return Autotuner("op", candidates(calls, kw.pop("names", ("slow", "fast"))), key=lambda n: (anchor(n),),
                     cache=cache, level=level, timer=fake_timer(timed), **kw)


def test_anchor_rounds_up_to_powers_of_two():
    assert [anchor(n) for n in (0, 1, 2, 3, 1000, 1024, 1025)] == [0, 1, 2, 4, 1024, 1024, 2048]


def test_fastest_candidate_wins_and_is_remembered(tmp_path):
    calls, timed = [], []
    t = tuner(calls, timed, AutotuneCache(tmp_path / "cpu.json"))
    assert t(5) == 6
    assert set(timed) == {"slow", "fast"}
    timed.clear()
    assert t.choose(7) == "fast"  # 7 anchors to the same key as 5: no new timing
    assert timed == []
    calls.clear()
    t(6)
    assert calls == ["fast"]
    assert t.choose(100) == "fast" and set(timed) == {"slow", "fast"}  # a new key is timed


def test_decisions_survive_a_restart_in_this_process(tmp_path):
    path = tmp_path / "cpu.json"
    tuner([], [], AutotuneCache(path))(3)
    calls, timed = [], []
    fresh = tuner(calls, timed, AutotuneCache(path))  # a new cache object re-reads the file
    fresh(3)
    assert timed == [] and calls == ["fast"], "the stored winner is reused without timing"


def test_a_second_process_reuses_the_cache_without_timing(tmp_path):
    path = tmp_path / "cpu.json"
    tuner([], [], AutotuneCache(path))(3)
    script = textwrap.dedent(f"""
        from ember.cube.runtime.autotune import Autotuner, AutotuneCache, anchor
        def never(name, run):
            raise AssertionError("timed " + name)
        t = Autotuner("op", {{"slow": len, "fast": len}}, key=lambda n: (anchor(n),),
                      cache=AutotuneCache({str(path)!r}), level="balanced", timer=never)
        print(t.choose(3))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "fast"


@pytest.mark.parametrize("content", ["{ not json", '["a list"]', '{"op:(4,)": 3}', "\xff\xfe",
                                     pytest.param("[" * 100_000 + "]" * 100_000, id="nested-100k-deep")])
def test_corrupt_cache_is_set_aside_with_a_warning_and_rebuilt(tmp_path, content):
    path = tmp_path / "cpu.json"
    path.write_bytes(content.encode("latin-1"))
    with pytest.warns(RuntimeWarning, match="unreadable.*set aside"):
        cache = AutotuneCache(path)
    assert cache.get("op", (4, "balanced")) is None
    assert (tmp_path / "cpu.corrupt").exists()
    tuner([], [], cache)(3)
    assert json.loads(path.read_text()) == {"op:(4, 'balanced')": "fast"}
    assert AutotuneCache(path).get("op", (4, "balanced")) == "fast"


def test_an_unwritable_cache_warns_and_keeps_deciding(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    cache = AutotuneCache(blocker / "cpu.json")  # its folder is a file: mkdir fails
    with pytest.warns(RuntimeWarning, match="cannot be written"):
        assert tuner([], [], cache).choose(3) == "fast"
    assert cache.get("op", (4, "balanced")) == "fast"


def test_minimal_level_takes_the_default_without_timing():
    calls, timed = [], []
    tuner(calls, timed, level="minimal")(1)
    assert calls == ["slow"] and timed == []


def test_levels_time_their_tiers():
    names = ("slow", "fast", "fastest")
    tiers = {"fast": "extensive", "fastest": "full"}
    for level, expect_timed, winner in [("balanced", [], "slow"), ("extensive", ["slow", "fast"], "fast"),
                                        ("full", ["slow", "fast", "fastest"], "fastest")]:
        timed = []
        t = tuner([], timed, level=level, names=names, tiers=tiers)
        assert t.timed(level) == (expect_timed or ["slow"])
        assert t.choose(1) == winner, level
        assert sorted(set(timed)) == sorted(expect_timed), level


def test_the_level_comes_from_settings(monkeypatch):
    timed = []
    t = Autotuner("op", candidates([]), key=lambda n: (n,), timer=fake_timer(timed))
    monkeypatch.setenv("EMBER_AUTOTUNE", "minimal")
    settings.reload()
    try:
        assert t.choose(1) == "slow" and timed == []
        monkeypatch.setenv("EMBER_AUTOTUNE", "balanced")
        settings.reload()
        assert t.choose(1) == "fast" and timed
    finally:
        monkeypatch.delenv("EMBER_AUTOTUNE")
        settings.reload()


def test_small_problems_take_the_default():
    timed = []
    t = tuner([], timed, worth=lambda n: n >= 100)
    assert t.choose(5) == "slow" and timed == []
    assert t.choose(500) == "fast"


def test_device_cache_lives_under_the_configured_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_AUTOTUNE_DIR", str(tmp_path))
    settings.reload()
    try:
        cache = device_cache("cuda:0")
        assert cache.path.parent == tmp_path and cache.path.name.startswith("cuda_0-")
        assert device_cache("cuda:0") is cache
    finally:
        monkeypatch.delenv("EMBER_AUTOTUNE_DIR")
        settings.reload()


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="at least one candidate"):
        Autotuner("op", {}, key=lambda: ())
    with pytest.raises(ValueError, match="'quick' is not one of " + ", ".join(LEVELS)):
        Autotuner("op", {"a": len}, key=lambda: (), level="quick")
    with pytest.raises(ValueError, match=r"unknown candidates \['b'\]"):
        Autotuner("op", {"a": len}, key=lambda: (), tiers={"b": "full"})


def test_real_timer_picks_a_candidate_and_results_match():
    # The default timer on real work: which one wins is not asserted, only that the answer is right.
    a = np.arange(12.0).reshape(3, 4)
    t = Autotuner("matmul", {"np": np.matmul, "dot": np.dot}, key=lambda x, y: (x.shape,), level="balanced")
    np.testing.assert_array_equal(t(a, a.T), a @ a.T)
    assert t.choose(a, a.T) in ("np", "dot")


def test_candidates_are_timed_aside_and_the_winner_runs_in_place():
    """`aside` wraps the timing runs only (the CUDA tuner's `runtime.unrecorded`); the winner's call is
    the op's own."""
    from contextlib import contextmanager
    calls, timed, log = [], [], []

    @contextmanager
    def aside():
        log.append("in")
        yield
        log.append(f"out after {len(calls)} calls")
    t = tuner(calls, timed, aside=aside)
    assert t(5) == 6
    assert log == ["in", "out after 8 calls"] and calls[8:] == ["fast"]  # 2 candidates x (warm-up + 3 timed runs)
    t(5)
    assert log == ["in", "out after 8 calls"], "a known key is not tuned again"
