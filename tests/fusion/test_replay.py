"""Replayed plans: a fused step's captured launch serves later blocks only for the input layout it was
captured on, and each replay writes fresh outputs."""

from __future__ import annotations

import threading

import numpy as np

import ember
import ember.debug


def _chain(t, c):
    return ((t * c).exp() + t).sin()


def _expected(a, c):
    # sin of exp(2a) + a, up to ~e^5: one f32 ulp of the argument is ~1e-5 there, so the kernel's vector
    # sinf and NumPy's differ by that much in absolute terms (AVX-512 hosts), hence the tests' atol.
    return np.sin(np.exp(a * np.float32(c)) + a)


def test_replays_write_fresh_outputs_and_follow_new_data(cpu, rng):
    backend = ember.debug.fusion_backend(cpu)
    results, hosts = [], []
    for _ in range(4):
        host = rng.standard_normal((5, 7)).astype(np.float32)
        hosts.append(host)
        results.append(_chain(ember.tensor(host, device=cpu), 0.5))
        backend.flush()
    for host, result in zip(hosts, results):  # earlier outputs were not overwritten by later replays
        np.testing.assert_allclose(result.numpy(), _expected(host, 0.5), rtol=1e-5, atol=1e-6)
    assert backend.stats()["plan_hits"] >= 3


def test_a_new_input_layout_is_captured_again(cpu, rng):
    host = rng.standard_normal((6, 6)).astype(np.float32)
    contiguous = ember.tensor(host, device=cpu)
    transposed = ember.tensor(np.ascontiguousarray(host.T), device=cpu).permute(1, 0)
    broadcast = ember.tensor(host[:1], device=cpu).expand(6, 6)
    spread = np.broadcast_to(host[:1], (6, 6))
    # The same block on inputs of one shape but different strides: one plan, three layouts, each run
    # twice in a row (captured, then replayed) and in turns.
    for x, want in [(contiguous, host), (contiguous, host), (transposed, host), (transposed, host),
                    (broadcast, spread), (broadcast, spread), (contiguous, host), (broadcast, spread)]:
        np.testing.assert_allclose(_chain(x, 2.0).numpy(), _expected(want, 2.0), rtol=1e-5, atol=1e-4)


def test_mixed_dtypes_and_several_outputs_replay(cpu, rng):
    for _ in range(3):
        a = rng.standard_normal(33).astype(np.float32)
        b = rng.integers(-5, 5, 33).astype(np.int64)
        x, y = ember.tensor(a, device=cpu), ember.tensor(b, device=cpu)
        u = x * y.cast(ember.f32)
        v = (u + 1.0).exp()
        np.testing.assert_allclose(v.numpy(), np.exp(a * b.astype(np.float32) + 1), rtol=1e-5)
        np.testing.assert_allclose(u.numpy(), a * b.astype(np.float32), rtol=1e-6)


def test_lone_library_ops_replay_on_new_data_and_layouts(cpu, rng):
    """A block of one elementwise op runs on the kernel library; its launch is replayed like a fused one."""
    backend = ember.debug.fusion_backend(cpu)
    hits = backend.stats()["plan_hits"]
    for step in range(6):
        a = rng.standard_normal((4, 6)).astype(np.float32)
        b = rng.integers(-9, 9, (4, 6)).astype(np.int32)
        x = ember.tensor(a, device=cpu)
        x = x if step % 2 else ember.tensor(np.ascontiguousarray(a.T), device=cpu).permute(1, 0)
        y = ember.tensor(b, device=cpu)
        np.testing.assert_allclose(x.exp().numpy(), np.exp(a), rtol=1e-6)
        np.testing.assert_array_equal((y * 3).numpy(), b * 3)
        np.testing.assert_array_equal((y + y).numpy(), b + b)
        np.testing.assert_array_equal(y.cast(ember.f32).numpy(), b.astype(np.float32))
    assert backend.stats()["plan_hits"] >= hits + 16


def test_lone_reductions_replay_on_new_data_and_alternating_sizes(cpu, rng):
    """A block of one reduction runs on the kernel library and is replayed; two sizes of one shape class
    (one plan) alternate, as the conv layers of a CNN do, and each keeps its capture."""
    backend = ember.debug.fusion_backend(cpu)
    hits = backend.stats()["plan_hits"]
    for step in range(8):
        shape = (6, 5, 7) if step % 2 else (3, 9, 4)
        a = rng.standard_normal(shape).astype(np.float32)
        x = ember.tensor(a, device=cpu)
        np.testing.assert_allclose(x.sum(dim=(0, 2), keepdim=True).numpy(), a.sum(axis=(0, 2), keepdims=True),
                                   rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(x.amax(dim=1).numpy(), a.max(axis=1))
    assert backend.stats()["plan_hits"] >= hits + 12
    plans = [p for p in backend.plans._plans.values() if any(len(r) == 2 and all(x is not None for _, x in r)
                                                             for r in p.replays)]
    assert plans, "no lone reduction kept a replay for each of its two layouts"


def test_fused_reductions_replay_on_new_data_layouts_and_sizes(cpu, rng):
    """A reduction that reads a fused program is captured and replayed per layout: strided and broadcast
    inputs, sizes of one shape class, and a long row (a split reduction, more than one launch)."""
    backend = ember.debug.fusion_backend(cpu)
    cases = [((5, 9), False), ((7, 3), False), ((5, 9), True), ((3, 40000), False)]
    for shape, transposed in cases * 2:
        a = rng.standard_normal(shape).astype(np.float32)
        b = rng.standard_normal(shape[-1:]).astype(np.float32)
        x = ember.tensor(np.ascontiguousarray(a.T), device=cpu).permute(1, 0) if transposed else \
            ember.tensor(a, device=cpu)
        got = ((x * ember.tensor(b, device=cpu)).exp()).sum(dim=-1)
        np.testing.assert_allclose(got.numpy(), np.exp(a * b).sum(axis=-1), rtol=1e-5)
    replayed = [r for p in backend.plans._plans.values() for k, s in enumerate(p.steps)
                if type(s).__name__ == "FusedReduce" for _, r in p.replays[k] if r is not None]
    assert replayed, "no fused reduction kept a captured launch"


def test_threads_with_different_programs_never_share_a_plan(cpu, rng):
    """Key parts are numbered once for every thread: a block recorded first in a new thread (a fresh
    stream) must not find the plan of another program that a different thread recorded first."""
    host = rng.standard_normal((3, 5)).astype(np.float32)
    x = ember.tensor(host, device=cpu)
    # Two ops each, so each block is one fused kernel whose program comes from the plan.
    programs = [(lambda t: t.exp().sin(), lambda a: np.sin(np.exp(a))), (lambda t: (-t).cos(), lambda a: np.cos(-a)),
                (lambda t: t.abs().sqrt(), lambda a: np.sqrt(np.abs(a))), (lambda t: (t * t).tanh(), lambda a: np.tanh(a * a))]
    results = {}

    def run(k: int) -> None:
        results[k] = programs[k][0](x).numpy()

    for k in range(len(programs)):  # one after the other, each in a thread of its own
        thread = threading.Thread(target=run, args=(k,))
        thread.start()
        thread.join()
    for k, (_, reference) in enumerate(programs):
        np.testing.assert_allclose(results[k], reference(host), rtol=1e-5, atol=1e-6)


def test_adam_updates_replay_on_new_data(cpu, rng, monkeypatch):
    """The Adam update (`ops.REPLAYABLE`) is one launch: captured, replayed on new data. Its first step
    passes the gradient twice (as the unread moments): found by pointer, that run is ambiguous and not
    captured; the second step's (the `first=False` form) is captured, and the later steps replay it."""
    from ember.kernels.optim import adam_reference
    from ember.cube.runtime.cpu import CpuRuntime
    from ember.optim.fused import adam_scalars, adam_step
    runs = []
    run = CpuRuntime.run
    monkeypatch.setattr(CpuRuntime, "run", lambda self, compiled, count, args: (runs.append(1), run(self, compiled,
                                                                                                    count, args)))
    p_host = rng.standard_normal((8, 5)).astype(np.float32)
    p, packed, packed_host = ember.tensor(p_host, device=cpu), None, None
    for t in range(1, 6):
        g_host = rng.standard_normal((8, 5)).astype(np.float32)
        s = adam_scalars(p, lr=0.1, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, decoupled=True, step=t)
        want = adam_reference(p_host, g_host, g_host if t == 1 else packed_host, s.numpy(), amsgrad=False,
                              first=t == 1)
        p, packed = adam_step(p, ember.tensor(g_host, device=cpu), packed, s, amsgrad=False)
        np.testing.assert_allclose(packed.numpy(), want, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(p.numpy(), packed.numpy()[:8])
        p_host, packed_host = want[:8], want
        if t == 2:
            second = len(runs)
    assert 2 <= second and len(runs) == second  # launched afresh at steps 1 and 2 (captured), then replayed


class _Kernel:
    """A fake compiled kernel: `fn(*args)` on NumPy arrays, `written[i]` when it stores to argument i."""

    def __init__(self, fn, written: tuple) -> None:
        self.fn, self.written = fn, written


class _Bound:
    def __init__(self, launch, slots) -> None:
        self.launch, self.slots = launch, list(slots)

    def replay(self, arrays) -> None:
        args = list(self.launch.args)
        for slot, a in zip(self.slots, arrays):
            args[slot] = a
        self.launch.compiled.fn(*args)


class _Runtime:
    """A runtime on NumPy arrays that notes its allocations and launches, as the CUDA runtime does."""

    def __init__(self) -> None:
        from ember.cube.runtime.launches import Launches
        self.launches = Launches()
        self.launches.allocations = []
        self.allocated = 0

    @staticmethod
    def address(a):
        return a.__array_interface__["data"][0] if isinstance(a, np.ndarray) else None

    shares_memory = staticmethod(np.may_share_memory)

    def empty(self, shape, dtype):
        self.allocated += 1
        a = np.empty(shape, dtype)
        self.launches.allocations.append(a)
        return a

    def run(self, kernel: _Kernel, *args) -> None:
        from ember.cube.runtime.launches import Launch
        self.launches.append(Launch(kernel, None, args))
        kernel.fn(*args)

    def bind(self, launch, slots):
        return _Bound(launch, slots)


def _partial_sums(x, partial):
    partial[...] = x.reshape(len(partial), -1).sum(axis=1)


def _total(partial, out):
    out[...] = partial.sum()


PARTIALS = _Kernel(_partial_sums, (False, True))
TOTAL = _Kernel(_total, (False, True))


def _two_stage_sum(rt: _Runtime, x: np.ndarray) -> np.ndarray:
    rt.empty((1,), x.dtype)  # allocated and never used (as the library's reduce does before it splits)
    partial = rt.empty((4,), x.dtype)
    rt.run(PARTIALS, x, partial)
    out = rt.empty((1,), x.dtype)
    rt.run(TOTAL, partial.reshape(2, 2), out)  # a view of the scratch, at its address
    return out.reshape(())


def test_a_run_of_several_launches_replays_with_fresh_scratch_and_outputs(rng):
    """`StepReplay` of a two-launch reduction (partial sums into a scratch array, then their total): the
    inputs and outputs fill the launches' slots, the scratch is allocated afresh at each replay, and
    only a layout's later run is taken (its first may have tuned)."""
    from ember.backend.cube.fused.launches import StepReplay
    rt = _Runtime()
    x = rng.standard_normal(32).astype(np.float32)
    out = _two_stage_sum(rt, x)
    layout = ("sum",)
    assert StepReplay.of(layout, rt.launches, [x], [out], rt, first=True) is None
    replay = StepReplay.of(layout, rt.launches, [x], [out], rt, first=False)
    assert replay is not None and len(replay.launches) == 2 and replay.scratch == [((4,), np.float32)]
    results = []
    for _ in range(3):
        y = rng.standard_normal(32).astype(np.float32)
        before = rt.allocated
        got, = replay([y])
        assert rt.allocated == before + 2  # the output and the scratch, fresh
        results.append((got, y))
    for got, y in results:  # earlier outputs are not overwritten by later replays
        assert got.shape == () and not np.shares_memory(got, out)
        np.testing.assert_allclose(got, y.sum(), rtol=1e-5)


def test_a_run_of_several_launches_is_not_replayed_when_it_writes_elsewhere(rng):
    """A launch of the sequence that writes an array the run did not allocate (state kept between runs),
    or an output that no launch writes, keeps the step from being captured."""
    from ember.backend.cube.fused.launches import StepReplay
    x = rng.standard_normal(32).astype(np.float32)
    kept = np.zeros(4, np.float32)
    rt = _Runtime()
    rt.run(PARTIALS, x, kept)
    out = rt.empty((1,), x.dtype)
    rt.run(TOTAL, kept, out)
    assert StepReplay.of(("sum",), rt.launches, [x], [out], rt, first=False) is None
    rt = _Runtime()
    partial = rt.empty((4,), x.dtype)
    rt.run(PARTIALS, x, partial)
    rt.run(TOTAL, partial, rt.empty((1,), x.dtype))
    elsewhere = np.full((1,), partial.sum(), np.float32)  # the output, made without the launches
    assert StepReplay.of(("sum",), rt.launches, [x], [elsewhere], rt, first=False) is None


def test_long_reductions_replay_on_new_data(fused, rng, monkeypatch):
    """Long reductions with few outputs (split over several cubes, then the partials reduced: more than
    one launch) and a mean of them, alone in their blocks, on new data each step. On a runtime that notes
    its allocations (CUDA) the sequence is captured and replayed (with CUDA graphs off: these small plans
    would replay as graphs instead)."""
    from ember.backend.cube.fused.cuda_graphs import replays_for
    backend = ember.debug.fusion_backend(fused)
    graphs = replays_for(backend.inner)
    if graphs is not None:
        monkeypatch.setattr(graphs, "enabled", False)
    for step in range(5):
        a = rng.standard_normal((3, 200000)).astype(np.float32)
        b = rng.standard_normal((200000, 3)).astype(np.float32)
        x, y = ember.tensor(a, device=fused), ember.tensor(b, device=fused)
        np.testing.assert_allclose(x.sum(dim=1).numpy(), a.sum(axis=1, dtype=np.float64), rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(y.sum(dim=0).numpy(), b.sum(axis=0, dtype=np.float64), rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(y.mean(dim=0).numpy(), b.mean(axis=0, dtype=np.float64), rtol=1e-4, atol=1e-6)
    if getattr(getattr(backend.inner, "runtime", None), "NOTES_ALLOCATIONS", False):
        sequences = [r for p in backend.plans._plans.values() for replays in p.replays for _, r in replays
                     if r is not None and len(getattr(r, "launches", ())) > 1]
        assert sequences, "no split reduction was captured as a sequence of launches"
