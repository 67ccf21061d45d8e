"""Ops recorded as inner steps (`ops.INNER`: views, matmul, convolutions, ...): they no longer cut the
stream, run through the inner backend with each block's own params, and fail clearly on read."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.debug
import ember.nn.functional as F
from ember.backend.fusion import ops as fusion_ops


def watch(backend) -> list:
    """The plans the backend runs from now on, as lists of (step kind, op names); stop with `backend.observer = None`."""
    seen = []

    def observe(plan, records) -> None:
        seen.append([(type(s).__name__, tuple(records[i].prim.name for i in s.nodes)) for s in plan.steps])
    backend.observer = observe
    return seen


def test_a_reshape_between_two_chains_is_one_block(cpu, rng):
    backend = ember.debug.fusion_backend(cpu)
    host = rng.standard_normal((4, 6)).astype(np.float32)
    x = ember.tensor(host, device=cpu)
    before = backend.stats()
    seen = watch(backend)
    try:
        y = ((x * 2.0).exp().reshape(3, 8) + 1.0).sin()
        assert backend.stats()["pending"] == 5
        got = y.numpy()
    finally:
        backend.observer = None
    after = backend.stats()
    assert after["flushes"] - before["flushes"] == 1
    assert seen == [[("Fused", ("mul", "exp")), ("Inner", ("reshape",)), ("Fused", ("add", "sin"))]]
    assert (after["kernels"] - before["kernels"], after["inner_ops"] - before["inner_ops"]) == (2, 1)
    np.testing.assert_allclose(got, np.sin(np.exp(host * 2).reshape(3, 8) + 1), rtol=1e-5, atol=1e-4)  # sin of ~e^5


def test_matmul_bias_relu_is_recorded_and_its_epilogue_fused(cpu, rng):
    backend = ember.debug.fusion_backend(cpu)
    a, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((5, 8), (8, 3), (3,)))
    x, weight, bias = (ember.tensor(h, device=cpu) for h in (a, w, b))
    seen = watch(backend)
    try:
        y = (x @ weight + bias).relu()
        assert backend.stats()["pending"] == 4  # relu is where(y <= 0, 0, y)
        got = y.numpy()
    finally:
        backend.observer = None
    assert seen == [[("Inner", ("matmul",)), ("Fused", ("add", "le", "where"))]]
    np.testing.assert_allclose(got, np.maximum(a @ w + b, 0), rtol=1e-5, atol=1e-6)


def test_a_matmul_after_elementwise_ops_starts_a_block_once_the_block_is_big(cpu, rng, monkeypatch):
    """A matmul after elementwise ops or reductions cuts the stream (ops.starts_block) once the block
    holds `max_ops // 2` records or `HELD_BYTES` of externals; a small block grows past it, and a matmul
    after only views and matmuls never cuts."""
    backend = ember.debug.fusion_backend(cpu)
    backend.flush()
    host = rng.standard_normal((4, 4)).astype(np.float32)
    x = ember.tensor(host, device=cpu)
    y = x.exp()
    z = y @ x
    assert backend.stats()["pending"] == 2  # a small block: no cut
    monkeypatch.setattr(fusion_ops, "HELD_BYTES", host.nbytes)  # the block holds x: big enough now
    w = z.tanh() @ x
    assert backend.stats()["pending"] == 1  # exp, the matmul and tanh ran; the matmul waits
    v = w.T @ x
    assert backend.stats()["pending"] == 3  # after a view and a matmul: no cut
    np.testing.assert_allclose(v.numpy(), (np.tanh(np.exp(host) @ host) @ host).T @ host, rtol=1e-4)
    monkeypatch.undo()
    y = x
    for _ in range(backend.max_ops // 4):  # two ops a round: the block reaches max_ops // 2
        y = y.sin() * 0.5
    assert backend.stats()["pending"] == backend.max_ops // 2
    z = y @ x
    assert backend.stats()["pending"] == 1
    expected = host
    for _ in range(backend.max_ops // 4):
        expected = np.sin(expected) * 0.5
    np.testing.assert_allclose(z.numpy(), expected @ host, rtol=1e-4, atol=1e-6)


def test_a_loop_that_never_syncs_settles_on_a_few_plans(cpu, rng):
    """Cuts at matmuls, each the same number of ops after the last: the blocks of a loop that never
    reads a value cycle through a few phases of its step, so after a while every block is a plan hit."""
    backend = ember.debug.fusion_backend(cpu)
    backend.flush()
    host = rng.standard_normal((4, 4)).astype(np.float32) * 0.5
    w = ember.tensor(host, device=cpu)
    x, expected = w, host
    misses = []
    for step in range(200):  # 7 ops a step, two matmuls after elementwise ops
        x = ((x * 0.9).sin() @ w).tanh()
        x = (x + 0.1) @ w * 0.5
        expected = np.tanh(np.sin(expected * 0.9) @ host)
        expected = (expected + 0.1) @ host * 0.5
        misses.append(backend.stats()["plan_misses"])
    assert backend.stats()["pending"] < backend.max_ops
    assert misses[-1] == misses[100] > 0  # no new plan in the last 100 steps
    np.testing.assert_allclose(x.numpy(), expected, rtol=1e-4, atol=1e-5)


def _block(x, n):
    """Views, a matmul and elementwise ops whose params depend on the batch size `n`."""
    h = (x * 0.5).permute(1, 0).reshape(n * 3, 2)[1:n * 3 - 1].flip(0)
    g = ember.cat([h, h.exp()], dim=1).pad((1, 0))
    return (g @ g.T).cumsum(1).sum(dim=1) + 1.0


def _expected(a, n):
    h = (a * 0.5).T.reshape(n * 3, 2)[1:n * 3 - 1][::-1]
    g = np.pad(np.concatenate([h, np.exp(h)], axis=1), ((0, 0), (1, 0)))
    return (g @ g.T).cumsum(1).sum(axis=1) + 1.0


def test_plans_replay_on_new_sizes_with_their_own_params_and_miss_on_a_new_class(cpu, rng, monkeypatch):
    backend = ember.debug.fusion_backend(cpu)
    monkeypatch.setattr(fusion_ops, "HELD_BYTES", 0)  # every block is big enough to be cut at a matmul
    backend.plans.clear()
    misses = []
    # A plan per block, its replay, then a size giving the same shape classes (all sizes distinct and
    # over 1, as with 8): a replay, whose views and matmul take this block's params and shapes.
    for n in (8, 8, 9):
        a = rng.standard_normal((n, 6)).astype(np.float32)
        before = backend.stats()
        got = _block(ember.tensor(a, device=cpu), n).numpy()
        after = backend.stats()
        np.testing.assert_allclose(got, _expected(a, n), rtol=1e-4, atol=1e-4)
        misses.append(after["plan_misses"] - before["plan_misses"])
        assert after["flushes"] - before["flushes"] == 2  # the matmul starts the second block
    assert misses == [2, 0, 0] and backend.stats()["plan_hits"] == 4
    a = rng.standard_normal((1, 6)).astype(np.float32)  # a size becoming 1: a new shape class, new plans
    np.testing.assert_allclose(_block(ember.tensor(a, device=cpu), 1).numpy(), _expected(a, 1), rtol=1e-4, atol=1e-4)
    assert backend.stats()["plan_misses"] > 2


def everything(x, w, k):
    """Most `INNER` ops on one input, mixed with elementwise ops and reductions."""
    y = (x * 2.0 - 1.0).expand(2, *x.shape)[:, :, 1:, ::2].flip(3)
    y = ember.cat([y, y.abs()], dim=1).pad((1, 1, 0, 1), value=0.5)
    y = y.slice_assign((slice(None), slice(0, 2)), y[:, 2:4].exp())
    c = F.conv2d(y, k, padding=1).relu()
    p = F.max_pool2d(c, 2) + F.avg_pool2d(c, 2)
    m = p.reshape(p.shape[0], -1) @ w
    return m.tanh(), c.cumsum(2).argmax(dim=3), p.sum()


def test_inner_ops_equal_unfused_and_the_reference(cpu, rng):
    """(On wgpu and CUDA the conformance suite checks the same ops fused against unfused.)"""
    hosts = [rng.standard_normal(s).astype(np.float32) for s in ((3, 7, 8), (36, 5), (4, 6, 3, 3))]

    def run(device):
        return [t.numpy() for t in everything(*[ember.tensor(h, device=device) for h in hosts])]

    backend = ember.debug.fusion_backend(cpu)
    before = backend.stats()
    got = run(cpu)
    after = backend.stats()
    ember.debug.set_fusion(cpu, False)
    try:
        unfused = run(cpu)
    finally:
        ember.debug.set_fusion(cpu, True)
    reference = run(ember.Device.numpy())
    assert after["inner_ops"] - before["inner_ops"] >= 15 and after["fallbacks"] == before["fallbacks"]
    for f, u, r in zip(got, unfused, reference):
        assert f.shape == u.shape == r.shape and f.dtype == u.dtype == r.dtype
        np.testing.assert_allclose(f, u, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(f, r, rtol=1e-4, atol=1e-4)


def test_an_error_in_a_recorded_inner_op_is_raised_on_read_naming_the_op(cpu, rng, monkeypatch):
    backend = ember.debug.fusion_backend(cpu)
    x = ember.tensor(rng.standard_normal((3, 3)).astype(np.float32), device=cpu)
    y = x @ x
    z = (y + 1.0).exp()
    inner = backend.inner.execute

    def broken(prim, *args):
        if prim.name == "matmul":
            raise MemoryError("the inner backend ran out of memory")
        return inner(prim, *args)

    monkeypatch.setattr(backend.inner, "execute", broken)
    with pytest.raises(MemoryError) as raised:
        z.numpy()
    assert any("matmul" in note and "sync point" in note for note in raised.value.__notes__)
    monkeypatch.undo()
    with pytest.raises(RuntimeError, match="not computed.*out of memory.*raised by matmul"):
        y.numpy()
    np.testing.assert_allclose((x @ x).numpy(), x.numpy() @ x.numpy(), rtol=1e-5)


def test_index_ops_raise_at_the_call_and_are_recorded_only_with_an_index_in_range(cpu, rng):
    backend = ember.debug.fusion_backend(cpu)
    host = rng.standard_normal((4, 5)).astype(np.float32)
    x = ember.tensor(host, device=cpu)
    y = x.exp() * 2.0
    assert backend.stats()["pending"] == 2
    with pytest.raises(IndexError, match="out of bounds"):  # at the call, as without fusion
        y.index_select(0, ember.tensor(np.array([0, 4]), device=cpu))
    assert backend.stats()["pending"] == 0  # its input was made concrete first
    y = x.exp() * 2.0
    picked = y.index_select(1, ember.tensor(np.array([4, 0]), device=cpu))  # host index in range: recorded
    rows = y.gather(0, ember.tensor(np.array([[3, 0, 1, 2, 3]]), device=cpu))
    assert backend.stats()["pending"] == 4
    pending_index = ember.tensor(np.array([1, 2]), device=cpu) + 1  # not data yet: a sync point
    chosen = y.index_select(0, pending_index)
    assert backend.stats()["pending"] == 0
    want = np.exp(host) * 2
    np.testing.assert_allclose(picked.numpy(), want[:, [4, 0]], rtol=1e-6)
    np.testing.assert_allclose(rows.numpy(), want[[3, 0, 1, 2, 3], range(5)][None], rtol=1e-6)
    np.testing.assert_allclose(chosen.numpy(), want[[2, 3]], rtol=1e-6)


def _index_reads(device, monkeypatch) -> list:
    """The dtype kinds of the device arrays read back to the host from now on; None on the CPU, whose
    arrays are host memory."""
    kind = ember.debug.fusion_backend(device).inner.runtime.ARRAY
    if kind is np.ndarray:
        return None
    reads = []
    original = kind.numpy
    monkeypatch.setattr(kind, "numpy", lambda self: reads.append(self.dtype.kind) or original(self))
    return reads


def test_an_index_made_by_views_and_where_of_host_data_is_bounded_by_it(fused, rng, monkeypatch):
    """`ops.index_bounds`: views and `where`s of host data (cross entropy's targets with ignored ones
    masked to 0) bound the index by the union of the host values without running it, so on the CPU the
    index op is recorded when that union is in range; otherwise it is a sync point, raising at the call
    if the values really are out of range. On a device the op runs at once, and with an index uploaded
    from host data (`DeviceArray.bounds`) the fusion backend vouches for the bounds: nothing is read
    back when they are in range."""
    backend = ember.debug.fusion_backend(fused)
    host = rng.standard_normal((6, 4)).astype(np.float32)
    x = ember.tensor(host, device=fused)
    reads = _index_reads(fused, monkeypatch)
    for target, recorded in (([3, 0, 0, 2, 1, 1], True), ([3, -1, 0, 2, -1, 1], False)):
        t = ember.tensor(np.array(target), device=fused)
        y = x.exp()
        flushes = backend.stats()["flushes"]
        picked = y.gather(1, t.masked_fill(t == -1, 0).unsqueeze(1)).squeeze(1)
        # not recorded (a device's index, or one out of range): the block was run first
        assert (backend.stats()["flushes"] == flushes) == (recorded and reads is None)
        fused.sync()
        assert reads is None or reads.count("i") == (0 if recorded else 1)
        want = np.exp(host)[range(6), np.maximum(target, 0)]
        np.testing.assert_allclose(picked.numpy(), want, rtol=1e-6)
        if reads is not None:
            reads.clear()
    flushes = backend.stats()["flushes"]
    empty = ember.tensor(np.zeros((0, 1), np.int64), device=fused).expand(0, 3)  # no values: in range
    assert x.exp().gather(0, empty).numpy().shape == (0, 3) and backend.stats()["flushes"] == flushes + 1
    y = x.exp()
    with pytest.raises(IndexError, match="out of bounds"):
        y.gather(1, t.masked_fill(t == -1, 4).unsqueeze(1))
    assert backend.stats()["pending"] == 0


def test_cross_entropy_of_uploaded_targets_reads_nothing_back(fused, rng, monkeypatch):
    """Cross entropy checks targets uploaded from the host against their bounds (`ember.tensor.value_bounds`):
    nothing is read back (a read would wait for all the queued work) before the loss is; targets out of
    range still raise at the call, naming the target."""
    from ember.nn.loss import cross_entropy
    logits = rng.standard_normal((5, 7)).astype(np.float32)
    labels = np.array([6, 0, 3, 3, 1])
    x = ember.tensor(logits, device=fused.autodiff()).require_grad()
    reads = _index_reads(fused, monkeypatch)
    loss = cross_entropy(x.exp().log(), ember.tensor(labels, device=fused))
    grads = loss.backward()
    fused.sync()
    assert not reads
    import torch
    theirs = torch.tensor(logits, requires_grad=True)
    want = torch.nn.functional.cross_entropy(theirs, torch.tensor(labels))
    want.backward()
    np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-5)
    np.testing.assert_allclose(grads.get(x).numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-6)
    with pytest.raises(IndexError, match="target 7 is out of bounds for 7 classes"):
        cross_entropy(x, ember.tensor(np.array([7, 0, 0, 0, 0]), device=fused))


def test_adam_updates_after_a_backward_pass_are_recorded_into_its_block(cpu, rng):
    """The fused Adam update is a pure backend extension (`ember.optim.fused`): an inner step of the
    plan, so a step after a backward pass flushes nothing; values and moments match PyTorch's when read."""
    import torch
    from ember.nn import Module
    from ember.nn.param import Param
    from ember.optim import AdamW

    class One(Module):
        def __init__(self, w) -> None:
            self.w = Param(w)
    backend = ember.debug.fusion_backend(cpu)
    a, w = rng.standard_normal((5, 4)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    model = One(ember.from_numpy(w, cpu.autodiff()))
    theirs = torch.tensor(w, requires_grad=True)
    opt, torch_opt = AdamW(model, lr=0.05, amsgrad=True), torch.optim.AdamW([theirs], lr=0.05, amsgrad=True)
    x = ember.from_numpy(a, cpu)
    for _ in range(2):
        grads = (x @ model.w).relu().sum().backward()
        flushes = backend.stats()["flushes"]
        opt.step(grads)
        assert backend.stats()["flushes"] == flushes and backend.stats()["pending"] > 0
        torch_opt.zero_grad()
        (torch.tensor(a) @ theirs).relu().sum().backward()
        torch_opt.step()
    np.testing.assert_allclose(model.w.numpy(), theirs.detach().numpy(), rtol=1e-5, atol=1e-6)
    saved = opt.state_dict()["params"]["w"]
    for key in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
        np.testing.assert_allclose(saved[key], torch_opt.state[theirs][key].numpy(),
                                   rtol=1e-5, atol=1e-7, err_msg=key)


def test_blocks_with_inner_ops_run_again_on_new_data_stay_right(fused, rng):
    """Run four times, each block's plan is replayed (on CUDA: captured as a graph on the second run and
    replayed after, with the matmul, views, cat and pad inside). Earlier results must not change when
    later runs reuse the plan."""
    if fused.kind == "wgpu":
        pytest.skip("wgpu replays no launches or graphs (the conformance suite covers its values)")
    results = []
    for _ in range(4):
        a, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((6, 8), (8, 8), (8,)))
        x, weight, bias = (ember.tensor(h, device=fused) for h in (a, w, b))
        h = ((x @ weight + bias).relu() * 0.5).reshape(4, 12).permute(1, 0)
        cat = ember.cat([h, h.exp()[:, :2].pad((0, 2))], dim=0).flip(1)
        results.append(((h, cat), (a, w, b)))
        fused.sync()
    for (h, cat), (a, w, b) in results:
        want = (np.maximum(a @ w + b, 0) * 0.5).reshape(4, 12).T
        np.testing.assert_allclose(h.numpy(), want, rtol=1e-5, atol=1e-5)
        padded = np.pad(np.exp(want)[:, :2], ((0, 0), (0, 2)))
        np.testing.assert_allclose(cat.numpy(), np.concatenate([want, padded])[:, ::-1], rtol=1e-5, atol=1e-5)
