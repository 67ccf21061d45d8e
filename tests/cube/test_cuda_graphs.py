"""Fusion plans replayed as CUDA graphs (ember/backend/cube/fused/cuda_graphs.py): the decisions against a fake
runtime and fake plans (no GPU), then real plans on Device.cuda(0) when a GPU is here."""

from __future__ import annotations

import gc
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from ember.backend.cube.fused import cuda_graphs as graphs
from ember.backend.cube.fused.cuda_graphs import GraphReplays, replays_for, signature
from ember.cube.runtime.cuda import cuda_available
from ember.cube.runtime.memory_pool import MemoryPool


# ----------------------------------------------------------------------------------------------
# Without a GPU: a runtime whose memory is a real MemoryPool over host pages and whose "kernels" are
# NumPy functions of addresses; a capture records the kernels, and a replay runs them again on whatever
# the recorded addresses hold then (what a CUDA graph does).

class FakeArray:
    """A view of a pool slice: shape, strides, dtype and a byte offset into the slice (as DeviceArray)."""

    def __init__(self, runtime, memory, shape, dtype, strides=None, offset=0, owner=None) -> None:
        self.runtime, self.memory, self.owner = runtime, memory, owner
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.size = int(np.prod(self.shape))
        self.nbytes = self.size * self.dtype.itemsize
        self.strides = tuple(strides) if strides is not None else np.empty(self.shape, self.dtype).strides
        self.offset = offset

    def __del__(self) -> None:
        if self.memory is not None and self.owner is None:
            self.runtime.pool.free_later(self.memory)

    @property
    def base(self) -> int:
        memory = self.memory if self.owner is None else self.owner.memory
        return memory.page.buffer.ctypes.data + memory.offset if memory is not None else 0

    @property
    def data(self) -> np.ndarray:
        return self.runtime.at(self.base + self.offset, self.shape, self.strides, self.dtype)

    def strided(self, shape, strides, offset):
        return FakeArray(self.runtime, None, shape, self.dtype, strides, offset, self if self.owner is None else self.owner)


class FakeGraph:
    def __init__(self, runtime, kernels: list, result) -> None:
        self.runtime, self.kernels, self.result = runtime, kernels, result
        self.nbytes = 0
        self.closed = False

    def replay(self) -> None:
        assert not self.closed
        self.runtime.replays += 1
        for kernel in self.kernels:
            kernel()

    def close(self) -> None:
        self.closed = True


class FakeRuntime:
    ARRAY = FakeArray
    graphs = True  # the `Runtime` member `replays_for` reads

    def __init__(self) -> None:
        self.pages: dict[int, np.ndarray] = {}
        self.pool = MemoryPool(self._allocate, lambda page: self.pages.pop(page.ctypes.data))
        self.lock = threading.RLock()
        self.captures = self.replays = 0
        self.fail_capture: Exception | None = None
        self.recording: list | None = None  # kernels of a capture

    def _allocate(self, nbytes: int) -> np.ndarray:
        page = np.zeros(nbytes, np.uint8)
        self.pages[page.ctypes.data] = page
        return page

    def at(self, address: int, shape, strides, dtype) -> np.ndarray:
        for base, page in self.pages.items():
            if base <= address < base + page.size or (base == address and not page.size):
                raw = page[address - base:]
                whole = raw.size // np.dtype(dtype).itemsize * np.dtype(dtype).itemsize
                return np.lib.stride_tricks.as_strided(raw[:whole].view(dtype), shape, strides)
        raise AssertionError(f"no page holds address {address}")

    def reserve(self, nbytes: int):
        return self.pool.reserve(nbytes)

    def empty(self, shape, dtype) -> FakeArray:
        a = FakeArray(self, None, shape, dtype)
        a.memory = self.reserve(a.nbytes) if a.nbytes else None
        return a

    def over(self, memory, shape, dtype) -> FakeArray:
        return FakeArray(self, memory, shape, dtype)

    @staticmethod
    def memory_of(a: FakeArray):
        return a.memory if a.owner is None else a.owner.memory

    @staticmethod
    def address(a: FakeArray) -> int:
        return a.base + a.offset

    @staticmethod
    def shares_memory(a: FakeArray, b: FakeArray) -> bool:
        return a.base == b.base

    def kernel(self, fn, out: FakeArray, *ins: FakeArray) -> None:
        """out = fn(*ins), reading and writing through addresses (as a launch does)."""
        where = [(self.address(a), a.shape, a.strides, a.dtype) for a in (out, *ins)]

        def launch() -> None:
            o, *i = (self.at(*w) for w in where)
            o[...] = fn(*i)
        with self.lock:  # the one stream: work queues in the order it takes the lock, and while a thread
            if self.recording is not None:  # captures (holding the lock, as the CUDA runtime's capture does),
                self.recording.append(launch)  # the others wait: only its own launches are recorded
            else:
                launch()

    def capture(self, fn, warmup: bool = True, keep: bool = True) -> FakeGraph:
        assert not warmup and not keep  # the plan ran before; the pool trace owns the memory
        self.captures += 1
        if self.fail_capture is not None:
            raise self.fail_capture
        self.recording = []
        try:
            result = fn()
        finally:
            kernels, self.recording = self.recording, None
        return FakeGraph(self, kernels, result)


class FakePlan:
    """t = x * scale (dropped), z = t + y (node 0), s = z.sum() (node 1), z.T (node 2, a view of z) and
    x[1] (node 3, a view of an input); scale is an op param."""

    live = [0, 1, 2, 3]

    def __init__(self, rt: FakeRuntime) -> None:
        self.rt, self.plain, self.leak = rt, 0, None

    def donated(self, externals):
        return frozenset()

    def run(self, records, externals, inner, graphs=True, donated=None):
        assert graphs is False and not donated
        rt, (x, y) = self.rt, externals
        self.plain += rt.recording is None
        scale = records[0].params["scale"]
        t = rt.empty(x.shape, x.dtype)
        rt.kernel(lambda a: a * scale, t, x)
        z = rt.empty(x.shape, x.dtype)
        rt.kernel(np.add, z, t, y)
        del t
        s = rt.empty((), x.dtype)
        rt.kernel(np.sum, s, z)
        if self.leak is not None:
            self.leak.append(rt.empty((2,), np.float32))
        return {0: z, 1: s, 2: z.strided(z.shape[::-1], z.strides[::-1], z.offset),
                3: x.strided(x.shape[1:], x.strides[1:], x.offset + x.strides[0])}


def fake(seed: int, enabled: bool = True) -> tuple:
    """(rng, runtime, plan, graph replays) for one test."""
    rt = FakeRuntime()
    return np.random.default_rng(seed), rt, FakePlan(rt), GraphReplays(rt, enabled=enabled)


def records(scale: float = 2.0) -> list:
    return [SimpleNamespace(index=0, params={"scale": scale}), SimpleNamespace(index=1, params={})]


def inputs(rt, rng, shape=(3, 4)) -> list:
    out = []
    for _ in range(2):
        a = rt.empty(shape, np.float32)
        with rt.lock:  # an upload queues on the stream
            a.data[...] = rng.standard_normal(shape)
        out.append(a)
    return out


def check(values, ext, scale=2.0) -> None:
    x, y = (a.data.copy() for a in ext)
    z = x * np.float32(scale) + y
    np.testing.assert_allclose(values[0].data, z, rtol=1e-6)
    np.testing.assert_allclose(values[1].data, z.sum(), rtol=1e-5)
    np.testing.assert_allclose(values[2].data, z.T, rtol=1e-6)
    np.testing.assert_array_equal(values[3].data, x[1])


def loop(replays, plan, rt, rng, steps: int, shape=(3, 4), scale=2.0, keep=None) -> None:
    """A periodic loop: inputs made, the plan run, everything dropped (kept in `keep` if given)."""
    for _ in range(steps):
        ext = inputs(rt, rng, shape)
        values = replays.run(plan, records(scale), ext, None)
        check(values, ext, scale)
        if keep is not None:  # the outputs stay alive, the inputs go
            keep.append((values, [a.data.copy() for a in ext]))
        del ext, values


def test_a_loop_captures_its_plan_at_the_second_run_and_replays_it_over_the_same_slices():
    rng, rt, plan, replays = fake(0)
    loop(replays, plan, rt, rng, 8)
    # Each step's arrays land where the last step's did (the pool's slabs hand out their lowest free chunk):
    # seen, captured, then replayed.
    assert replays.counts == {"captures": 1, "replays": 6, "mismatched": 0, "refused": 0}
    assert rt.captures == 1 and rt.replays == 7 and plan.plain == 1
    assert replays.stats()["graphs"] == 1 and replays.stats()["pinned_bytes"] == 0
    # The graph holds none of its outputs: everything the loop made is back in the pool.
    gc.collect()
    assert rt.pool.stats().in_use == 0


def test_outputs_kept_alive_move_the_next_runs_slices_and_those_runs_are_plain_and_right():
    rng, rt, plan, replays = fake(1)
    loop(replays, plan, rt, rng, 8)  # captured
    kept: list = []
    loop(replays, plan, rt, rng, 4, keep=kept)
    for values, host in kept:  # no replay wrote over an output still alive
        z = host[0] * np.float32(2.0) + host[1]
        np.testing.assert_allclose(values[0].data, z, rtol=1e-6)
        np.testing.assert_allclose(values[1].data, z.sum(), rtol=1e-5)
    del kept, values, host
    gc.collect()
    assert rt.pool.stats().in_use == 0


def test_a_trace_that_meets_another_slice_gives_back_what_it_took_and_runs_plainly():
    rng, rt, plan, replays = fake(7)
    loop(replays, plan, rt, rng, 8)  # captured: the next inputs meet a graph
    before = dict(replays.counts)
    ext = inputs(rt, rng)
    blocker = rt.empty((3, 4), np.float32)  # takes the slice the plan's first intermediate had
    values = replays.run(plan, records(), ext, None)
    assert replays.counts == {**before, "mismatched": before["mismatched"] + 1}
    check(values, ext)
    del ext, values, blocker
    gc.collect()
    assert rt.pool.stats().in_use == 0  # nothing the mismatched trace reserved stayed taken


def test_a_graph_whose_slices_land_elsewhere_for_good_is_captured_again_there():
    """Same inputs, but the plan's own slices now land elsewhere at every run (a loop's layout that settled
    after the capture): one mismatch drops the graph, the next run captures it again, the later ones replay."""
    rng, rt, plan, replays = fake(9)
    loop(replays, plan, rt, rng, 8)  # captured and replayed
    before = dict(replays.counts)
    blocker = None
    for _ in range(5):
        ext = inputs(rt, rng)
        if blocker is None:
            blocker = rt.empty((3, 4), np.float32)  # takes the slice the plan's first intermediate had, for good
        values = replays.run(plan, records(), ext, None)
        check(values, ext)
        del ext, values
    assert {k: replays.counts[k] - before[k] for k in before} == {"captures": 1, "replays": 3, "mismatched": 1,
                                                                 "refused": 0}


def test_a_launch_that_fails_gives_back_what_the_replay_took_and_raises():
    rng, rt, plan, replays = fake(9)
    loop(replays, plan, rt, rng, 3)  # captured and replayed
    ext = inputs(rt, rng)
    (state,) = replays._plans.values()
    (found,) = state.graphs.values()

    def failing() -> None:
        raise RuntimeError("launch failed")

    found.graph.replay = failing
    with pytest.raises(RuntimeError, match="launch failed"):
        replays.run(plan, records(), ext, None)
    del ext
    gc.collect()
    assert rt.pool.stats().in_use == 0


def test_a_new_layout_address_or_param_is_a_new_key():
    rng, rt, plan, replays = fake(2)
    seen = []
    for shape, scale in [((3, 4), 2.0), ((5, 4), 2.0), ((3, 4), -1.5)]:
        loop(replays, plan, rt, rng, 6, shape=shape, scale=scale)
        seen.append(dict(replays.counts))
    assert all(after["captures"] > before["captures"] for before, after in zip([{"captures": 0}, *seen], seen))
    held = rt.empty((64,), np.float32)  # the loop's arrays land elsewhere now: new keys, seen once first
    before = dict(replays.counts)
    loop(replays, plan, rt, rng, 1)
    assert replays.counts == {**before, "mismatched": replays.counts["mismatched"]}  # nothing replayed
    loop(replays, plan, rt, rng, 6)
    assert replays.counts["replays"] > before["replays"]
    del held
    a, b = inputs(rt, rng)
    assert signature(records(), [a, a], FakeArray) == signature(records(), [a, b], FakeArray)  # addresses aside
    t = a.strided((4, 3), a.strides[::-1], a.offset)
    assert signature(records(), [a, a], FakeArray) != signature(records(), [a, t], FakeArray)  # strides
    assert signature(records(), [a, np.zeros((3, 4), np.float32)], FakeArray) is None  # not on the device
    assert signature([SimpleNamespace(index=0, params={"v": [1]})], [a], FakeArray) is None  # unhashable


def test_a_failed_capture_runs_plainly_and_refuses_that_layout():
    rng, rt, plan, replays = fake(3)
    rt.fail_capture = RuntimeError("a copy to the host cannot be captured")
    loop(replays, plan, rt, rng, 4)
    assert rt.captures == 1 and replays.counts == {"captures": 0, "replays": 0, "mismatched": 0, "refused": 1}
    assert plan.plain == 4 and "host" in str(replays.last_error)


def test_a_capture_that_keeps_memory_it_does_not_output_is_refused():
    rng = np.random.default_rng(4)
    rt = FakeRuntime()
    plan = FakePlan(rt)
    plan.leak = []  # each run keeps a slice of its own beyond its outputs (a cache, another thread)
    replays = GraphReplays(rt)
    loop(replays, plan, rt, rng, 4)
    assert replays.counts["refused"] == 1 and replays.reasons == {"trace": 1} and replays.counts["replays"] == 0
    assert rt.captures == 1 and replays.stats()["graphs"] == 0


def test_threads_running_one_plan_each_get_their_own_result():
    rt = FakeRuntime()
    plan = FakePlan(rt)
    replays = GraphReplays(rt)
    loop(replays, plan, rt, np.random.default_rng(9), 4)  # a graph first (the threads' keys may not recur)
    assert replays.counts["captures"] == 1 and replays.counts["replays"] == 2
    errors = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            loop(replays, plan, rt, rng, 30)
        except AssertionError as error:
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_switched_off_or_foreign_inputs_run_plainly():
    rng, rt, plan, replays = fake(5, enabled=False)
    loop(replays, plan, rt, rng, 3)
    assert rt.captures == 0 and plan.plain == 3


def test_an_evicted_plan_drops_its_graphs_and_at_most_per_plan_keys_keep_one(monkeypatch):
    monkeypatch.setattr(graphs, "PER_PLAN", 3)
    rng, rt, plan, replays = fake(6)
    for n in range(graphs.PER_PLAN + 1):
        loop(replays, plan, rt, rng, 4, shape=(2, n + 1))
    assert replays.counts["captures"] > graphs.PER_PLAN
    assert replays.stats()["graphs"] == graphs.PER_PLAN  # the least recently used went
    del plan
    gc.collect()
    assert replays.stats()["graphs"] == 0 and replays.stats()["pinned_bytes"] == 0


def moving_keys(replays, plan, rt, rng, keys: int) -> list:
    """`keys` keys each run twice (captured while the plan may), then its inputs land elsewhere for good;
    the arrays that hold the old places, to keep."""
    held = []
    for _ in range(keys):
        loop(replays, plan, rt, rng, 2)
        held.append(rt.empty((3, 4), np.float32))
    return held


def test_a_plan_whose_keys_do_not_come_back_stops_capturing(monkeypatch):
    monkeypatch.setattr(graphs, "SPARE", 2)
    rng, rt, plan, replays = fake(8)
    held = moving_keys(replays, plan, rt, rng, 6)
    assert replays.counts["captures"] == 2 and replays.counts["replays"] == 0
    assert rt.captures == 2 and plan.plain == 10
    loop(replays, plan, rt, rng, 3)  # a key that would recur gets no graph now either
    assert replays.counts["captures"] == 2


def test_a_plan_past_its_spare_captures_tries_again_after_retry_plain_runs(monkeypatch):
    """Graphs that mismatched while a loop's layout settled spend a plan's spare captures; once the layout
    is steady, `RETRY` plain runs later the plan captures its key again and replays it."""
    monkeypatch.setattr(graphs, "SPARE", 2)
    monkeypatch.setattr(graphs, "RETRY", 8)
    rng, rt, plan, replays = fake(10)
    held = moving_keys(replays, plan, rt, rng, 4)
    assert replays.counts["captures"] == 2 and replays.counts["replays"] == 0
    loop(replays, plan, rt, rng, 3)  # steady now, but past its spare captures: plain
    assert replays.counts["captures"] == 2
    loop(replays, plan, rt, rng, 6)  # 8 plain runs since the last capture: captured, then replayed
    assert replays.counts["captures"] == 3 and replays.counts["replays"] == 4 and replays.counts["mismatched"] == 0


class Inner:
    def __init__(self, runtime) -> None:
        self.runtime = runtime


def test_only_runtimes_that_capture_get_graphs_and_the_setting_switches_them_off(monkeypatch):
    from ember import settings
    from ember.backend.cube.backend import CubeBackend
    from ember.cube.runtime.cpu import cpu_runtime
    assert replays_for(CubeBackend(cpu_runtime())) is None  # the CPU runtime has no graphs
    inner = Inner(FakeRuntime())
    found = replays_for(inner)
    assert isinstance(found, GraphReplays) and found.runtime is inner.runtime
    assert replays_for(inner) is found
    monkeypatch.setenv("EMBER_CUDA_GRAPHS", "0")
    settings.reload()
    try:
        other = Inner(FakeRuntime())
        assert replays_for(other) is None
    finally:
        monkeypatch.delenv("EMBER_CUDA_GRAPHS")
        settings.reload()


# ----------------------------------------------------------------------------------------------
# On a GPU: real plans through Device.cuda(0)

gpu = pytest.mark.skipif(not cuda_available()[0], reason=f"no CUDA GPU here: {cuda_available()[1]}")


@pytest.fixture
def cuda():
    import ember
    import ember.debug
    device = ember.Device.cuda(0)
    fusion = ember.debug.fusion_backend(device)
    if fusion is None:
        pytest.skip("Device.cuda(0) has no fusion layer (EMBER_FUSION=0)")
    replays = replays_for(fusion.inner)
    if replays is None:
        pytest.skip("CUDA graphs are off (EMBER_CUDA_GRAPHS=0)")
    fusion.flush()
    fusion.plans.clear()
    replays.clear()
    replays.counts = dict.fromkeys(replays.counts, 0)
    replays.reasons = {}
    return SimpleNamespace(device=device, fusion=fusion, replays=replays, rt=fusion.inner.runtime)


def _step(x, w, b):
    """A block of elementwise ops and reductions (several fused kernels)."""
    h = (x * w + b).tanh()
    return h, (h * h).sum(1), (h - x).abs().amax()


def _step_reference(x, w, b):
    h = np.tanh(x * w + b)
    return h, (h * h).sum(1), np.abs(h - x).max()


@gpu
def test_a_plan_replayed_as_a_graph_computes_what_numpy_does_on_new_inputs_every_step(cuda):
    import ember
    rng = np.random.default_rng(10)
    kept = None
    for step in range(10):
        host = [rng.standard_normal(s).astype(np.float32) for s in ((64, 33), (33,), (64, 1))]
        out = _step(*(ember.tensor(h, device=cuda.device) for h in host))
        want = _step_reference(*host)
        if step == 6:  # kept alive: later steps meet other slices (and run plainly) but never write it
            kept = out, want
        for got, ref in zip(out, want):
            np.testing.assert_allclose(got.numpy(), ref, rtol=2e-5, atol=1e-5)
        del out
    stats = cuda.replays.stats()
    assert stats["captures"] >= 1 and stats["replays"] >= 2, stats
    assert cuda.replays.reasons == {}, (cuda.replays.reasons, cuda.replays.last_error)
    for got, ref in zip(*kept):
        np.testing.assert_allclose(got.numpy(), ref, rtol=2e-5, atol=1e-5)


@gpu
def test_a_plan_holding_a_cublas_matmul_is_captured_and_replays_what_numpy_computes(cuda):
    import ember
    from ember.cube.runtime.cublas import cublas_available
    if not cublas_available()[0]:
        pytest.skip(cublas_available()[1])
    rng = np.random.default_rng(13)
    for step in range(8):
        host = [rng.standard_normal(s).astype(np.float32) for s in ((48, 40), (40, 24), (24,))]
        x, w, b = (ember.tensor(h, device=cuda.device) for h in host)
        h = (x @ w + b).relu()
        out = h, (h * h).sum(1)
        ref = np.maximum(host[0].astype(np.float64) @ host[1] + host[2], 0)
        for got, want in zip(out, (ref, (ref * ref).sum(1))):  # TF32 matmuls where [cuda] allow_tf32 is on
            np.testing.assert_allclose(got.numpy(), want, rtol=5e-3, atol=5e-3)
        del x, w, b, h, out
    stats = cuda.replays.stats()
    assert cuda.replays.reasons == {}, (cuda.replays.reasons, cuda.replays.last_error)
    assert stats["captures"] >= 1 and stats["replays"] >= 2, stats


@gpu
def test_training_with_graphs_matches_training_without(cuda):
    import ember
    from ember.nn import Linear, Module
    from ember.nn.loss import cross_entropy
    from ember.optim import AdamW

    class MLP(Module):
        def __init__(self, device) -> None:
            self.layers = [Linear(16, 32, device=device), Linear(32, 4, device=device)]

        def forward(self, x):
            return self.layers[1](self.layers[0](x).relu())

    def train(enabled: bool) -> tuple:
        """Gradients of 6 forward and backward passes on fixed parameters (each step's arrays land
        where the last step's did: its plans replay), then the parameters after 8 AdamW steps."""
        cuda.replays.enabled = enabled
        device = cuda.device.autodiff()
        device.seed(0)
        model = MLP(device)
        rng = np.random.default_rng(11)
        x = ember.tensor(rng.standard_normal((8, 16)).astype(np.float32), device=device)
        y = ember.tensor(rng.integers(0, 4, 8), device=device)
        grads = []
        for _ in range(6):
            g = cross_entropy(model(x), y).backward()
            grads.append([g.get(p).numpy() for _, p in model.named_parameters()])
            del g
        optimizer = AdamW(model, lr=1e-2)
        for _ in range(8):
            x = ember.tensor(rng.standard_normal((8, 16)).astype(np.float32), device=device)
            y = ember.tensor(rng.integers(0, 4, 8), device=device)
            optimizer.step(cross_entropy(model(x), y).backward())
        cuda.device.sync()
        return grads, [p.numpy() for _, p in model.named_parameters()]

    try:
        with_graphs = train(True)
        captured = cuda.replays.stats()
        without = train(False)
    finally:
        cuda.replays.enabled = True
    # The fixed-parameter passes replay; AdamW's out-of-place updates move the parameters, so its
    # steps seldom meet their plans' keys again (they run plainly).
    assert captured["replays"] >= 1 and captured["refused"] == 0, (captured, cuda.replays.last_error)
    for step_with, step_without in zip(with_graphs[0], without[0]):
        for a, b in zip(step_with, step_without):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(with_graphs[1], without[1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@gpu
def test_graphs_pin_no_tensors_and_go_with_their_plans(cuda):
    import ember
    rng = np.random.default_rng(12)

    def loop(steps: int) -> None:
        for _ in range(steps):
            host = [rng.standard_normal(s).astype(np.float32) for s in ((256, 64), (64,), (256, 1))]
            out = _step(*(ember.tensor(h, device=cuda.device) for h in host))
            cuda.device.sync()
            del out
        gc.collect()

    cuda.replays.enabled = False
    try:
        loop(2)  # the plain kernels' layout arrays are on the device now (the runtime keeps them)
    finally:
        cuda.replays.enabled = True
    start = cuda.rt.memory_stats().in_use
    loop(6)
    stats = cuda.replays.stats()
    assert stats["replays"] >= 1, stats
    # What the loop made is back in the pool; the graphs hold only layout arrays (a few hundred bytes).
    assert cuda.rt.memory_stats().in_use - start <= stats["pinned_bytes"] < 64 << 10, (
        cuda.rt.memory_stats().in_use - start, stats)
    cuda.fusion.plans.clear()  # evicts every plan: their graphs go
    gc.collect()
    assert cuda.replays.stats()["graphs"] == 0


class FakeDonatingPlan:
    """s = state * 0.5 + g (node 0), written over `state` when `donate` says so (as Adam's update over its
    previous packed state, `donation.py`), else into a new array."""

    live = [0]

    def __init__(self, rt: FakeRuntime) -> None:
        self.rt, self.donate = rt, True

    def donated(self, externals):
        return frozenset({0}) if self.donate else frozenset()

    def run(self, records, externals, inner, graphs=True, donated=None):
        rt, (state, g) = self.rt, externals
        out = state if donated else rt.empty(state.shape, state.dtype)
        rt.kernel(lambda s, d: s * np.float32(0.5) + d, out, state, g)
        return {0: out}


def test_a_graph_written_over_its_input_replays_in_place_and_never_where_the_plan_would_not():
    rng, rt = np.random.default_rng(3), FakeRuntime()
    plan, replays = FakeDonatingPlan(rt), GraphReplays(rt)
    state = inputs(rt, rng)[0]
    g = rt.empty(state.shape, np.float32)
    for step in range(6):  # the state keeps its place: run, captured, replayed
        with rt.lock:
            g.data[...] = rng.standard_normal(g.shape)
        want = state.data * np.float32(0.5) + g.data
        values = replays.run(plan, records(), [state, g], None)
        assert values[0] is state  # the input itself, not a view of it
        np.testing.assert_allclose(state.data, want, rtol=1e-6)
    assert replays.counts["captures"] == 1 and replays.counts["replays"] == 4
    plan.donate = False  # someone holds the old state now: another key, and the old values stay
    kept = state.data.copy()
    values = replays.run(plan, records(), [state, g], None)
    np.testing.assert_array_equal(state.data, kept)
    np.testing.assert_allclose(values[0].data, kept * np.float32(0.5) + g.data, rtol=1e-6)
    assert replays.counts["replays"] == 4 and values[0] is not state
