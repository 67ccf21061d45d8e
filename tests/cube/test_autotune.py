"""Autotune: the fastest candidate wins, decisions persist across restarts, corrupt caches rebuild."""

import time

import pytest

from ember.cube.runtime.autotune import AutotuneCache, Autotuner, anchor


def candidates(calls):
    def fast(n):
        calls.append("fast")
        return n + 1

    def slow(n):
        calls.append("slow")
        time.sleep(0.003)
        return n + 1

    return {"slow": slow, "fast": fast}


def test_anchor_rounds_up_to_powers_of_two():
    assert [anchor(n) for n in (0, 1, 2, 3, 1000, 1024, 1025)] == [0, 1, 2, 4, 1024, 1024, 2048]


def test_fastest_candidate_wins_and_is_remembered(tmp_path):
    calls = []
    tuner = Autotuner("op", candidates(calls), key=lambda n: (anchor(n),),
                      cache=AutotuneCache(tmp_path / "cpu.json"), level="balanced")
    assert tuner(5) == 6
    assert tuner.choose(7) == "fast"  # 7 anchors to the same key as 5: no new timing
    calls.clear()
    tuner(6)
    assert calls == ["fast"]


def test_decisions_survive_a_restart(tmp_path):
    path = tmp_path / "cpu.json"
    Autotuner("op", candidates([]), key=lambda n: (anchor(n),), cache=AutotuneCache(path), level="balanced")(3)
    calls = []
    fresh = Autotuner("op", candidates(calls), key=lambda n: (anchor(n),), cache=AutotuneCache(path),
                      level="balanced")
    fresh(3)
    assert calls == ["fast"], "a restarted process reuses the stored winner without timing"


def test_corrupt_cache_is_set_aside_and_rebuilt(tmp_path):
    path = tmp_path / "cpu.json"
    path.write_text("{ not json")
    cache = AutotuneCache(path)
    assert cache.get("op", (4,)) is None
    assert (tmp_path / "cpu.corrupt").exists()
    Autotuner("op", candidates([]), key=lambda n: (anchor(n),), cache=cache, level="balanced")(3)
    assert AutotuneCache(path).get("op", (4,)) == "fast"


def test_minimal_level_takes_the_first_candidate_without_timing():
    calls = []
    tuner = Autotuner("op", candidates(calls), key=lambda n: (n,), level="minimal")
    tuner(1)
    assert calls == ["slow"]


def test_slow_candidates_only_at_full_level():
    calls = []
    tuner = Autotuner("op", candidates(calls), key=lambda n: (n,), level="balanced", slow=("fast",))
    assert tuner.choose(1) == "slow"
    assert Autotuner("op", candidates([]), key=lambda n: (n,), level="full", slow=("fast",)).choose(1) == "fast"


def test_needs_candidates():
    with pytest.raises(ValueError, match="at least one candidate"):
        Autotuner("op", {}, key=lambda: ())
