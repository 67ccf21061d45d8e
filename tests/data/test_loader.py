"""DataLoader: batching, seeded order, resume, and worker processes (determinism, errors, shutdown).

Worker tests use tiny datasets; each starts at most two worker processes.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np
import pytest

from ember.data import DataLoader, Dataset, InMemoryDataset, WorkerError


class Numbers(Dataset[tuple[np.ndarray, int]]):
    """Item i is (a vector filled with i, i); module-level so spawned workers can unpickle it."""

    def __init__(self, n: int, fail_at: int = -1, stall_at: int = -1, crash_at: int = -1) -> None:
        self.n, self.fail_at, self.stall_at, self.crash_at = n, fail_at, stall_at, crash_at

    def __len__(self) -> int:
        return self.n

    def get(self, i: int) -> tuple[np.ndarray, int]:
        if i == self.fail_at:
            raise ValueError(f"item {i} is broken")
        if i == self.stall_at:
            time.sleep(60)
        if i == self.crash_at:
            os._exit(3)
        return np.full(3, i, dtype=np.float32), i


def _labels(batches: list[Any]) -> list[list[int]]:
    return [b[1].tolist() for b in batches]


_BEFORE: set = set()


def leaked() -> list:
    """Child processes started during this test and still alive (others' children don't count)."""
    return [p for p in mp.active_children() if p not in _BEFORE]


@pytest.fixture(autouse=True)
def no_leaked_workers() -> Any:
    _BEFORE.clear()
    _BEFORE.update(mp.active_children())
    yield
    assert leaked() == []


def test_sequential_batches_and_len() -> None:
    loader = DataLoader(Numbers(10), batch_size=4)
    assert len(loader) == 3
    batches = list(loader)
    assert _labels(batches) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    np.testing.assert_array_equal(batches[2][0], [[8, 8, 8], [9, 9, 9]])


def test_drop_last() -> None:
    loader = DataLoader(Numbers(10), batch_size=4, drop_last=True)
    assert len(loader) == 2
    assert _labels(list(loader)) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert len(DataLoader(Numbers(3), batch_size=4, drop_last=True)) == 0


def test_shuffle_order_is_a_function_of_seed_and_epoch() -> None:
    loader = DataLoader(Numbers(10), batch_size=3, shuffle=True, seed=7)
    epoch0, epoch1 = sum(_labels(list(loader)), []), sum(_labels(list(loader)), [])
    assert epoch0 == np.random.default_rng([7, 0]).permutation(10).tolist()
    assert epoch1 == np.random.default_rng([7, 1]).permutation(10).tolist()
    assert loader.epoch == 2
    loader.set_epoch(1)
    assert sum(_labels(list(loader)), []) == epoch1
    other = DataLoader(Numbers(10), batch_size=3, shuffle=True, seed=8)
    assert sum(_labels(list(other)), []) != epoch0


def test_resume_mid_epoch_from_state_dict() -> None:
    loader = DataLoader(Numbers(11), batch_size=2, shuffle=True, seed=3)
    list(loader)  # epoch 0 done
    full_epoch1 = _labels(_epoch(loader, 1))
    it = iter(loader)
    seen = [next(it)[1].tolist() for _ in range(2)]
    state = loader.state_dict()
    assert state == {"epoch": 1, "position": 2, "seed": 3}
    it.close()

    resumed = DataLoader(Numbers(11), batch_size=2, shuffle=True, seed=3)
    resumed.load_state_dict(state)
    rest = _labels(list(resumed))
    assert seen + rest == full_epoch1
    assert resumed.state_dict() == {"epoch": 2, "position": 0, "seed": 3}


def _epoch(loader: DataLoader[Any], epoch: int) -> list[Any]:
    probe = DataLoader(loader.dataset, loader.batch_size, shuffle=loader.shuffle, seed=loader.seed)
    probe.set_epoch(epoch)
    return list(probe)


def test_state_saved_after_the_last_batch_resumes_at_the_next_epoch() -> None:
    loader = DataLoader(Numbers(4), batch_size=2, shuffle=True, seed=0)
    assert loader.state_dict() == {"epoch": 0, "position": 0, "seed": 0}
    it = iter(loader)
    next(it), next(it)
    assert loader.state_dict() == {"epoch": 1, "position": 0, "seed": 0}
    resumed = DataLoader(Numbers(4), batch_size=2, shuffle=True, seed=0)
    resumed.load_state_dict({"epoch": 0, "position": 2, "seed": 0})
    assert resumed.epoch == 1 and _labels(list(resumed)) == _labels(_epoch(resumed, 1))


def test_empty_dataset_gives_no_batches_and_counts_the_epoch() -> None:
    loader = DataLoader(InMemoryDataset([]), batch_size=3, num_workers=1)
    assert len(loader) == 0 and list(loader) == [] and loader.epoch == 1


def test_load_state_dict_validates() -> None:
    loader = DataLoader(Numbers(4), batch_size=2, seed=1)
    with pytest.raises(ValueError, match="seed 2 but this loader has seed 1"):
        loader.load_state_dict({"epoch": 0, "position": 0, "seed": 2})
    with pytest.raises(ValueError, match="position 5 is outside 0..2"):
        loader.load_state_dict({"epoch": 0, "position": 5, "seed": 1})
    with pytest.raises(KeyError, match="missing"):
        loader.load_state_dict({"epoch": 0})


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        DataLoader(Numbers(4), batch_size=0)
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader(Numbers(4), batch_size=1, num_workers=-1)
    with pytest.raises(ValueError, match="multiprocessing_context must be one of"):
        DataLoader(Numbers(4), batch_size=1, multiprocessing_context="threads")
    with pytest.raises(TypeError, match="needs a Dataset or a sequence"):
        DataLoader({1, 2}, batch_size=1)  # type: ignore[arg-type]


def test_custom_batcher() -> None:
    loader = DataLoader(InMemoryDataset(["a", "b", "c"]), batch_size=2, batcher="".join)
    assert list(loader) == ["ab", "c"]


def test_identical_batches_for_any_worker_count() -> None:
    results = []
    for workers in (0, 1, 2):
        loader = DataLoader(Numbers(23), batch_size=3, shuffle=True, seed=5, num_workers=workers, prefetch=1)
        results.append([list(loader), list(loader)])  # two epochs, two different orders
    for batches in results[1:]:
        for epoch_a, epoch_b in zip(results[0], batches):
            assert len(epoch_a) == len(epoch_b) == 8
            for a, b in zip(epoch_a, epoch_b):
                np.testing.assert_array_equal(a[0], b[0])
                np.testing.assert_array_equal(a[1], b[1])
    assert _labels(results[0][0]) != _labels(results[0][1])


def test_worker_error_carries_traceback_and_workers_stop() -> None:
    loader = DataLoader(Numbers(12, fail_at=7), batch_size=2, num_workers=2)
    got = []
    with pytest.raises(WorkerError) as info:
        for batch in loader:
            got.append(batch[1].tolist())
    message = str(info.value)
    assert "ValueError: item 7 is broken" in message
    assert "Traceback (most recent call last)" in message and "in get" in message
    assert "batch 3" in message
    assert got == [[0, 1], [2, 3], [4, 5]], "batches before the broken one arrive in order"
    assert leaked() == []
    assert loader.state_dict()["position"] == 3


def test_closed_iterator_is_exhausted() -> None:
    loader = DataLoader(Numbers(8), batch_size=2, num_workers=1)
    it = iter(loader)
    next(it)
    it.close()
    assert leaked() == []
    with pytest.raises(StopIteration):
        next(it)
    assert loader.epoch == 0 and loader.state_dict()["position"] == 1


def test_serial_error_is_the_original_exception() -> None:
    with pytest.raises(ValueError, match="item 1 is broken"):
        list(DataLoader(Numbers(4, fail_at=1), batch_size=2))


def test_early_break_and_garbage_collection_stop_workers() -> None:
    loader = DataLoader(Numbers(40), batch_size=2, num_workers=2)
    for batch in loader:
        break
    assert batch[1].tolist() == [0, 1]
    assert leaked() == []
    assert loader.epoch == 0, "an abandoned pass does not finish the epoch"

    it = iter(loader)
    next(it)
    del it
    gc.collect()
    assert leaked() == []


def test_keyboard_interrupt_while_waiting_stops_workers() -> None:
    loader = DataLoader(Numbers(6, stall_at=2), batch_size=2, num_workers=1, prefetch=1)
    it = iter(loader)
    assert next(it)[1].tolist() == [0, 1]
    # Batch 1 stalls in the worker, so the main process is waiting inside next() when Ctrl-C lands.
    # Python's own SIGINT handler, whatever ran before in this process (a pytest-xdist worker may hold
    # another, or ignore SIGINT: then next() waited out the stall and the test failed).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    try:
        with pytest.raises(KeyboardInterrupt):
            timer.start()
            next(it)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert leaked() == []


def test_crashed_worker_is_reported() -> None:
    loader = DataLoader(Numbers(6, crash_at=3), batch_size=2, num_workers=1)
    with pytest.raises(WorkerError, match="worker 0 .* exited unexpectedly with exit code 3"):
        list(loader)


def test_device_conversion_happens_in_the_main_process(monkeypatch: pytest.MonkeyPatch) -> None:
    import ember

    monkeypatch.setattr(ember, "from_numpy", lambda a, device=None: ("on", device, os.getpid(), a.shape),
                        raising=False)
    loader = DataLoader(Numbers(3), batch_size=2, num_workers=1, device="dev")
    assert list(loader) == [(("on", "dev", os.getpid(), (2, 3)), ("on", "dev", os.getpid(), (2,))),
                            (("on", "dev", os.getpid(), (1, 3)), ("on", "dev", os.getpid(), (1,)))]


def test_unpicklable_dataset_with_workers_explains() -> None:
    ds = InMemoryDataset([1, 2]).map(lambda x: x + 1)
    with pytest.raises(TypeError, match="not lambdas or local functions"):
        list(DataLoader(ds, batch_size=1, num_workers=1, multiprocessing_context="spawn"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork is the default on Linux only")
def test_forked_workers_by_default_take_lambdas() -> None:
    ds = InMemoryDataset([1, 2, 3]).map(lambda x: x + 1)
    loader = DataLoader(ds, batch_size=2, num_workers=2)
    assert loader.multiprocessing_context == "fork"
    assert [b.tolist() for b in loader] == [[2, 3], [4]]


def test_sequences_are_datasets_read_in_place() -> None:
    class MapStyle:  # PyTorch's map-style protocol, not an ember Dataset
        def __init__(self) -> None:
            self.reads: list[int] = []

        def __len__(self) -> int:
            return 5

        def __getitem__(self, i: int) -> int:
            self.reads.append(i)
            return i * 10
    assert [b.tolist() for b in DataLoader([3, 1, 4, 1, 5], batch_size=2)] == [[3, 1], [4, 1], [5]]
    array = np.arange(12, dtype=np.float32).reshape(6, 2)
    batches = list(DataLoader(array, batch_size=4, shuffle=True, seed=3))
    np.testing.assert_array_equal(np.concatenate(batches), array[np.random.default_rng([3, 0]).permutation(6)])
    source = MapStyle()
    loader = DataLoader(source, batch_size=2)
    assert source.reads == [] and len(loader) == 3  # nothing read (or copied) before iteration
    assert [b.tolist() for b in loader] == [[0, 10], [20, 30], [40]] and source.reads == [0, 1, 2, 3, 4]
    with pytest.raises(TypeError, match="a Dataset or a sequence"):
        DataLoader(42, batch_size=1)


def test_samplers_follow_seed_and_epoch_like_numpy() -> None:
    from ember.data import RandomSampler, SequentialSampler, SubsetRandomSampler, WeightedRandomSampler
    items = list(range(100, 130))
    n = len(items)

    def order(loader: DataLoader, epoch: int) -> list[int]:
        loader.set_epoch(epoch)
        return np.concatenate(list(loader)).tolist()
    weights = np.random.default_rng(7).random(n) * (np.arange(n) % 3 != 0)  # every third index weight 0
    subset = [29, 3, 17, 8, 11]
    cases = {  # sampler -> the NumPy oracle of its indices in epoch e for seed 5
        SequentialSampler(items): lambda rng: np.arange(n),
        RandomSampler(items): lambda rng: rng.permutation(n),
        RandomSampler(items, replacement=True, num_samples=45): lambda rng: rng.integers(0, n, size=45),
        SubsetRandomSampler(subset): lambda rng: np.asarray(subset)[rng.permutation(len(subset))],
        WeightedRandomSampler(weights, 50): lambda rng: rng.choice(n, 50, replace=True, p=weights / weights.sum()),
        WeightedRandomSampler(weights, 12, replacement=False):
            lambda rng: rng.choice(n, 12, replace=False, p=weights / weights.sum()),
    }
    for sampler, oracle in cases.items():
        loader = DataLoader(items, batch_size=7, sampler=sampler, seed=5)
        assert len(loader) == -(-len(sampler) // 7)
        for epoch in (0, 1):
            expected = [items[i] for i in oracle(np.random.default_rng([5, epoch]))]
            assert order(loader, epoch) == expected, type(sampler).__name__
        assert order(loader, 1) == order(DataLoader(items, batch_size=7, sampler=sampler, seed=5), 1)
        assert len(loader.batch_indices(0)) == len(loader)
    drawn = order(DataLoader(items, batch_size=8, sampler=WeightedRandomSampler(weights, 200), seed=0), 0)
    assert all((x - 100) % 3 != 0 for x in drawn)  # weight 0 is never drawn
    unique = order(DataLoader(items, batch_size=8, sampler=WeightedRandomSampler(weights, 20, False)), 0)
    assert len(set(unique)) == 20
    # resuming mid-epoch with a sampler continues the same order, with workers too
    loader = DataLoader(items, batch_size=4, sampler=RandomSampler(items), seed=2, num_workers=2)
    full = [b.tolist() for b in loader]
    loader.load_state_dict({"epoch": 0, "position": 3, "seed": 2})
    assert [b.tolist() for b in loader] == full[3:]
    assert order(DataLoader(items, batch_size=4, shuffle=True, seed=2), 0) == sum(full, [])
    with pytest.raises(ValueError, match="shuffle=True or a sampler"):
        DataLoader(items, batch_size=1, shuffle=True, sampler=RandomSampler(items))
    with pytest.raises(IndexError, match="SubsetRandomSampler gave index 40 for a dataset of 30 items"):
        list(DataLoader(items, batch_size=1, sampler=SubsetRandomSampler([1, 40])))
    for bad, match in ((lambda: WeightedRandomSampler([1.0, -1.0], 2), "finite, >= 0"),
                       (lambda: WeightedRandomSampler([0.0, 0.0], 2), "not all 0"),
                       (lambda: WeightedRandomSampler([1.0, 0.0], 2, replacement=False), "2 samples without"),
                       (lambda: RandomSampler(items, num_samples=3), "replacement=True"),
                       (lambda: RandomSampler(items, True, num_samples=0), "positive integer")):
        with pytest.raises(ValueError, match=match):
            bad()
    with pytest.raises(TypeError, match="sampler must be"):
        DataLoader(items, batch_size=1, sampler=[0, 1])


UNGUARDED = """
import sys
from ember.data import DataLoader
print("top level", flush=True)
loader = DataLoader(list(range(6)), batch_size=2, num_workers=2, **CONTEXT)
print([b.tolist() for b in loader], flush=True)
"""


@pytest.mark.parametrize("context", [None, "spawn"])
def test_an_unguarded_script_with_workers(tmp_path, context) -> None:
    """Forked (the default on Linux), an unguarded script runs its top level once; spawned, its workers
    stop with a WorkerError saying to add the guard, and the main process's error points there."""
    script = tmp_path / "train.py"
    script.write_text(UNGUARDED.replace("**CONTEXT", "" if context is None else f"multiprocessing_context={context!r}"))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         cwd=os.getcwd(), env={**os.environ, "PYTHONPATH": os.getcwd()})
    if context is None and sys.platform.startswith("linux"):
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == ["top level", "[[0, 1], [2, 3], [4, 5]]"]
        return
    assert out.returncode == 1
    assert "WorkerError: DataLoader workers started with 'spawn' or 'forkserver' import the main script again" \
        in out.stderr, out.stderr
    assert 'if __name__ == "__main__":' in out.stderr
    assert "exited unexpectedly with exit code 1" in out.stderr and "guard stops its workers" in out.stderr


def _shift(item: tuple[np.ndarray, int], rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """A random augmentation: add noise fixed by the generator."""
    x, label = item
    return x + rng.standard_normal(x.shape).astype(np.float32), label


def test_random_augmentation_is_identical_across_workers_and_varies_by_epoch() -> None:
    ds = Numbers(9).map_random(_shift, seed=4)
    runs = []
    for workers in (0, 2):
        loader = DataLoader(ds, batch_size=4, shuffle=True, seed=1, num_workers=workers)
        runs.append([np.concatenate([b[0] for b in loader]) for _ in range(2)])
    for epoch in range(2):
        np.testing.assert_array_equal(runs[0][epoch], runs[1][epoch])
    order0 = np.random.default_rng([1, 0]).permutation(9)
    order1 = np.random.default_rng([1, 1]).permutation(9)
    first0 = runs[0][0][np.argsort(order0)]
    first1 = runs[0][1][np.argsort(order1)]
    assert not np.allclose(first0, first1), "each epoch draws new augmentations"
