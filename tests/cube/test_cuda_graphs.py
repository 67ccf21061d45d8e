"""Fusion plans replayed as CUDA graphs (ember/backend/fusion/graphs.py): the decisions against a fake
runtime and fake plans (no GPU), then real plans on Device.cuda(0) when a GPU is here."""

from __future__ import annotations

import gc
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from ember.backend.fusion import graphs
from ember.backend.fusion.graphs import GraphReplays, replays_for, signature
from ember.cube.runtime.cuda import cuda_available


# ----------------------------------------------------------------------------------------------
# Without a GPU: a runtime whose "device arrays" are NumPy arrays and whose graphs re-run the
# captured function, writing into the arrays the capture allocated (what a CUDA graph does).

class FakeArray:
    def __init__(self, data: np.ndarray) -> None:
        self.data = data
        self.shape, self.strides, self.dtype, self.nbytes = data.shape, data.strides, data.dtype, data.nbytes


class FakeGraph:
    def __init__(self, runtime, fn) -> None:
        self.runtime, self.fn = runtime, fn
        self.result = fn()
        self.nbytes = sum(a.nbytes for a in self.result.values()) + runtime.extra_pinned
        self.closed = False

    def replay(self) -> None:
        assert not self.closed
        self.runtime.replays += 1
        for i, a in self.fn().items():
            self.result[i].data[...] = a.data

    def close(self) -> None:
        self.closed = True


class FakeRuntime:
    ARRAY = FakeArray

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.captures = self.replays = self.copies = 0
        self.fail_capture: Exception | None = None
        self.extra_pinned = 0  # intermediates a capture pins beyond its outputs
        self.graphs: list[FakeGraph] = []

    def like(self, a: FakeArray) -> FakeArray:
        return FakeArray(np.empty_like(a.data))

    def copy_span(self, src: FakeArray, dst: FakeArray) -> None:
        self.copies += 1
        dst.data[...] = src.data

    def capture(self, fn, warmup: bool = True) -> FakeGraph:
        assert not warmup  # the plan ran before: its kernels are compiled, its layouts on the device
        self.captures += 1
        if self.fail_capture is not None:
            raise self.fail_capture
        self.graphs.append(FakeGraph(self, fn))
        return self.graphs[-1]


class FakePlan:
    """z = x * scale + y (node 0, live), w = z.sum() (node 1, live); scale is an op param."""

    live = [0, 1]

    def __init__(self) -> None:
        self.plain = 0

    def run(self, records, externals, inner, graphs=True):
        assert graphs is False
        self.plain += 1
        x, y = (a.data for a in externals)
        z = x * records[0].params["scale"] + y
        return {0: FakeArray(z), 1: FakeArray(np.asarray(z.sum(), z.dtype))}


def records(scale: float = 2.0) -> list:
    return [SimpleNamespace(index=0, params={"scale": scale}), SimpleNamespace(index=1, params={})]


def arrays(rng, shape=(3, 4)) -> list:
    return [FakeArray(rng.standard_normal(shape).astype(np.float32)) for _ in range(2)]


def expected(externals, scale=2.0) -> np.ndarray:
    return externals[0].data * scale + externals[1].data


def test_second_run_captures_later_runs_replay_with_inputs_copied_in_and_outputs_copied_out():
    rng = np.random.default_rng(0)
    rt, plan = FakeRuntime(), FakePlan()
    replays = GraphReplays(rt)
    kept = []
    for step in range(5):
        ext = arrays(rng)
        values = replays.run(plan, records(), ext, None)
        np.testing.assert_allclose(values[0].data, expected(ext), rtol=1e-6)
        np.testing.assert_allclose(values[1].data, expected(ext).sum(), rtol=1e-5)
        kept.append((values, expected(ext)))
    assert replays.counts == {"captures": 1, "replays": 3, "refused": 0}
    assert rt.captures == 1 and rt.replays == 4  # the capturing run replays too
    # Outputs are fresh arrays: a later replay (which rewrites the graph's own) never changes them.
    for values, want in kept:
        np.testing.assert_allclose(values[0].data, want, rtol=1e-6)
        assert all(v is not out for v in values.values() for out in rt.graphs[0].result.values())
    # One copy per input and per output on each graph run (the 2nd run's capture plus 3 replays).
    assert rt.copies == 4 * (2 + 2)
    assert replays.stats()["graphs"] == 1 and replays.stats()["pinned_bytes"] == 3 * 4 * 4 + 4


def test_a_new_layout_or_param_is_a_new_signature():
    rng = np.random.default_rng(1)
    rt, plan = FakeRuntime(), FakePlan()
    replays = GraphReplays(rt)
    for shape, scale in [((3, 4), 2.0), ((3, 4), 2.0), ((5, 4), 2.0), ((3, 4), -1.5), ((3, 4), -1.5)]:
        ext = arrays(rng, shape)
        np.testing.assert_allclose(replays.run(plan, records(scale), ext, None)[0].data, expected(ext, scale),
                                   rtol=1e-6)
    assert replays.counts["captures"] == 2 and rt.replays == 2  # (3,4)x2.0 and (3,4)x-1.5, once each
    a = FakeArray(np.zeros((3, 4), np.float32))
    b = FakeArray(np.zeros((4, 3), np.float32).T)
    assert signature(records(), [a, a], FakeArray) != signature(records(), [a, b], FakeArray)  # strides
    assert signature(records(), [a, np.zeros((3, 4), np.float32)], FakeArray) is None  # not on the device
    assert signature([SimpleNamespace(index=0, params={"v": [1]})], [a], FakeArray) is None  # unhashable


def test_a_failed_capture_runs_plainly_and_refuses_that_signature():
    rng = np.random.default_rng(2)
    rt, plan = FakeRuntime(), FakePlan()
    rt.fail_capture = RuntimeError("a copy to the host cannot be captured")
    replays = GraphReplays(rt)
    for _ in range(4):
        ext = arrays(rng)
        np.testing.assert_allclose(replays.run(plan, records(), ext, None)[0].data, expected(ext), rtol=1e-6)
    assert rt.captures == 1 and replays.counts == {"captures": 0, "replays": 0, "refused": 1}
    assert plan.plain == 4 and "host" in str(replays.last_error)


def test_threads_replaying_one_plan_each_get_their_own_result():
    rt, plan = FakeRuntime(), FakePlan()
    replays = GraphReplays(rt)
    errors = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(30):
            ext = arrays(rng)
            got = replays.run(plan, records(), ext, None)[0].data
            if not np.allclose(got, expected(ext), rtol=1e-6):
                errors.append(seed)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and replays.counts["captures"] == 1 and replays.counts["replays"] >= 100


def test_large_plans_get_no_graph():
    rng = np.random.default_rng(3)
    rt, plan = FakeRuntime(), FakePlan()
    replays = GraphReplays(rt, max_bytes=100)  # the inputs alone are 96 bytes, the outputs 52 more
    for _ in range(3):
        replays.run(plan, records(), arrays(rng), None)
    assert rt.captures == 0 and replays.counts["refused"] == 1
    rt.extra_pinned = 1 << 20  # small inputs and outputs, but the capture pins a MiB of intermediates
    replays = GraphReplays(rt, max_bytes=1 << 19)
    for _ in range(3):
        ext = arrays(rng)
        np.testing.assert_allclose(replays.run(plan, records(), ext, None)[0].data, expected(ext), rtol=1e-6)
    assert rt.captures == 1 and rt.graphs[-1].closed and replays.counts["captures"] == 0


def test_switched_off_or_foreign_inputs_run_plainly():
    rng = np.random.default_rng(4)
    rt, plan = FakeRuntime(), FakePlan()
    replays = GraphReplays(rt, enabled=False)
    for _ in range(3):
        replays.run(plan, records(), arrays(rng), None)
    assert rt.captures == 0 and plan.plain == 3


def test_an_evicted_plan_drops_its_graphs_and_at_most_per_plan_layouts_keep_one():
    rng = np.random.default_rng(5)
    rt, plan = FakeRuntime(), FakePlan()
    replays = GraphReplays(rt)
    for n in range(graphs.PER_PLAN + 1):
        for _ in range(2):
            replays.run(plan, records(), arrays(rng, (n + 1, 2)), None)
    assert replays.stats()["graphs"] == graphs.PER_PLAN  # the least recently used went: its layout is new again
    for _ in range(2):
        replays.run(plan, records(), arrays(rng, (1, 2)), None)
    assert replays.counts["captures"] == graphs.PER_PLAN + 2 and replays.stats()["graphs"] == graphs.PER_PLAN
    del plan
    gc.collect()
    assert replays.stats() == {"captures": graphs.PER_PLAN + 2, "replays": 0, "refused": 0, "graphs": 0,
                               "pinned_bytes": 0}


class Inner:
    def __init__(self, runtime) -> None:
        self.runtime = runtime


def test_only_runtimes_that_capture_get_graphs_and_the_setting_switches_them_off(monkeypatch):
    from ember import settings
    from ember.backend.cube.backend import CubeBackend
    assert replays_for(CubeBackend()) is None  # the CPU runtime has no graphs
    inner = Inner(FakeRuntime())
    found = replays_for(inner)
    assert isinstance(found, GraphReplays) and found.runtime is inner.runtime
    assert found.max_bytes == 16 << 20 and replays_for(inner) is found
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
    results = []
    for step in range(6):
        host = [rng.standard_normal(s).astype(np.float32) for s in ((64, 33), (33,), (64, 1))]
        out = _step(*(ember.tensor(h, device=cuda.device) for h in host))
        cuda.device.sync()
        results.append((out, _step_reference(*host)))
    stats = cuda.replays.stats()
    assert stats["captures"] >= 1 and stats["replays"] >= 4 * stats["captures"], stats
    assert stats["pinned_bytes"] > 0
    for out, want in results:  # earlier steps' values are untouched by later replays
        for got, ref in zip(out, want):
            np.testing.assert_allclose(got.numpy(), ref, rtol=2e-5, atol=1e-5)


@gpu
def test_a_plan_holding_a_cublas_matmul_is_captured_and_replays_what_numpy_computes(cuda):
    import ember
    from ember.cube.runtime.cublas import cublas_available
    if not cublas_available()[0]:
        pytest.skip(cublas_available()[1])
    rng = np.random.default_rng(13)
    results = []
    for step in range(6):
        host = [rng.standard_normal(s).astype(np.float32) for s in ((48, 40), (40, 24), (24,))]
        x, w, b = (ember.tensor(h, device=cuda.device) for h in host)
        h = (x @ w + b).relu()
        out = h, (h * h).sum(1)
        cuda.device.sync()
        ref = np.maximum(host[0].astype(np.float64) @ host[1] + host[2], 0)
        results.append((out, (ref, (ref * ref).sum(1))))
    stats = cuda.replays.stats()
    assert cuda.replays.reasons == {}, (cuda.replays.reasons, cuda.replays.last_error)
    assert stats["captures"] >= 1 and stats["replays"] >= 3, stats
    for out, want in results:  # TF32 matmuls where [cuda] allow_tf32 is on
        for got, ref in zip(out, want):
            np.testing.assert_allclose(got.numpy(), ref, rtol=5e-3, atol=5e-3)


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

    def train(enabled: bool) -> list:
        cuda.replays.enabled = enabled
        device = cuda.device.autodiff()
        device.seed(0)
        model = MLP(device)
        optimizer = AdamW(model, lr=1e-2)
        rng = np.random.default_rng(11)
        for _ in range(6):
            x = ember.tensor(rng.standard_normal((8, 16)).astype(np.float32), device=device)
            y = ember.tensor(rng.integers(0, 4, 8), device=device)
            optimizer.step(cross_entropy(model(x), y).backward())
        cuda.device.sync()
        return [p.numpy() for _, p in model.named_parameters()]

    try:
        with_graphs = train(True)
        captured = cuda.replays.stats()
        without = train(False)
    finally:
        cuda.replays.enabled = True
    assert captured["captures"] >= 1 and captured["replays"] >= 1, captured
    for a, b in zip(with_graphs, without):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@gpu
def test_graphs_pin_their_memory_until_their_plans_are_evicted(cuda):
    import ember
    rng = np.random.default_rng(12)
    for _ in range(3):
        host = [rng.standard_normal(s).astype(np.float32) for s in ((256, 64), (64,), (256, 1))]
        out = _step(*(ember.tensor(h, device=cuda.device) for h in host))
        cuda.device.sync()
    del out
    gc.collect()
    pinned = cuda.replays.stats()["pinned_bytes"]
    assert pinned > 0
    in_use = cuda.rt.memory_stats().in_use
    cuda.fusion.plans.clear()  # evicts every plan: their graphs go, and what they pinned is freed
    gc.collect()
    cuda.rt.synchronize()
    assert cuda.replays.stats()["graphs"] == 0
    assert cuda.rt.memory_stats().in_use <= in_use - pinned


def test_like_and_copy_span_keep_a_views_layout_in_one_copy():
    """What a graph's own inputs are made with, on the real runtime over a fake driver (host memory)."""
    from ember.cube.runtime.cuda import CudaRuntime
    from .test_cuda_runtime import FakeDriver
    driver = FakeDriver()
    copies = []
    driver.cuMemcpyDtoDAsync = lambda dst, src, n, stream: copies.append(n) or driver._copy(dst, src, n, stream)
    rt = CudaRuntime(0, driver=driver)
    host = np.random.default_rng(6).standard_normal((5, 7)).astype(np.float32)
    base = rt.to_device(host)
    for view, want in ((base, host), (base.T, host.T), (base[::-2, 1:], host[::-2, 1:]),
                       (base[:, :1].broadcast_to((5, 4)), np.broadcast_to(host[:, :1], (5, 4)))):
        mine = rt.like(view)
        assert (mine.shape, mine.strides, mine.dtype) == (view.shape, view.strides, view.dtype)
        rt.copy_span(view, mine)
        np.testing.assert_array_equal(mine.numpy(), want)
    assert len(copies) == 4  # one device-to-device copy each
    with pytest.raises(ValueError, match="equal layouts"):
        rt.copy_span(base, rt.like(base.T))
