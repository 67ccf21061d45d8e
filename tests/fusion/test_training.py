"""A training loop on the fused device: the plan cache replays steps, nothing leaks, gradients (with
and without checkpointing) equal the unfused ones."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.debug


def params(rng, device, sizes=(6, 16, 3)):
    ws = [rng.standard_normal((a, b)).astype(np.float32) * 0.3 for a, b in zip(sizes, sizes[1:])]
    return [ember.tensor(w, device=device).require_grad() for w in ws]


def step(ws, x, y, lr=0.1):
    """One SGD step of a 2-layer MLP with a softmax cross-entropy loss; the new weights and the loss."""
    h = ember.activation.gelu(x @ ws[0])
    logits = h @ ws[1]
    loss = -(logits.log_softmax(-1) * y).sum(dim=-1).mean()
    grads = loss.backward()
    with ember.no_grad():
        new = [(w - lr * w.grad(grads)).require_grad() for w in ws]
    return new, loss


def batch(rng, device, n=8):
    x = ember.tensor(rng.standard_normal((n, 6)).astype(np.float32), device=device)
    y = ember.tensor(np.eye(3, dtype=np.float32)[rng.integers(0, 3, n)], device=device)
    return x, y


def train(rng, device, steps):
    ws = params(rng, device)
    losses = []
    for _ in range(steps):
        ws, loss = step(ws, *batch(rng, device))
        losses.append(float(loss.item()))
    return ws, losses


def test_second_identical_step_replays_plans(cpu, rng):
    """The first step starts from weights that are data; every later one from the previous step's
    pending update, so the second step is the first of the steady state, the third replays it."""
    backend = ember.debug.fusion_backend(cpu)
    device = cpu.autodiff()
    ws = params(rng, device)
    for _ in range(2):
        ws, loss = step(ws, *batch(rng, device))
        loss.item()
    first = backend.stats()
    ws, loss = step(ws, *batch(rng, device))
    loss.item()
    second = backend.stats()
    assert second["plan_misses"] == first["plan_misses"]
    assert second["plan_hits"] - first["plan_hits"] > 0
    assert second["kernels"] > first["kernels"]  # the backward pass fuses too
    # A new shape class (another rank) is a new plan.
    x, y = batch(rng, device)
    step(ws, x.reshape(2, 4, 6), y.reshape(2, 4, 3))[1].item()
    assert backend.stats()["plan_misses"] > second["plan_misses"]


def test_a_new_batch_size_replays_the_same_plans(cpu, rng):
    """Plans are keyed by shape classes (which sizes are equal, which are 0 or 1), not sizes. Two steps
    of batch 8 first: the first step starts from weights that are data, a block of its own (in a fresh
    process nothing else has made the later steps' plans: it failed when it ran first in its worker)."""
    backend = ember.debug.fusion_backend(cpu)
    device = cpu.autodiff()
    ws = params(rng, device)
    for _ in range(2):
        ws, loss = step(ws, *batch(rng, device, n=8))
        loss.item()
    misses = backend.stats()["plan_misses"]
    ws, loss = step(ws, *batch(rng, device, n=11))
    loss.item()
    assert backend.stats()["plan_misses"] == misses


@pytest.mark.parametrize("checkpointing", [None, "balanced"])
def test_training_fused_equals_unfused(cpu, checkpointing):
    device = cpu.autodiff(checkpointing=checkpointing)
    fused_ws, fused_losses = train(np.random.default_rng(0), device, 4)
    ember.debug.set_fusion(cpu, False)
    try:
        plain_ws, plain_losses = train(np.random.default_rng(0), device, 4)
    finally:
        ember.debug.set_fusion(cpu, True)
    reference_ws, _ = train(np.random.default_rng(0), ember.Device.numpy().autodiff(), 4)
    np.testing.assert_allclose(fused_losses, plain_losses, rtol=1e-5)
    for f, p, r in zip(fused_ws, plain_ws, reference_ws):
        np.testing.assert_allclose(f.numpy(), p.numpy(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(f.numpy(), r.numpy(), rtol=1e-4, atol=1e-6)
    assert fused_losses[-1] < fused_losses[0]


def test_many_steps_leak_nothing(cpu, rng):
    backend = ember.debug.fusion_backend(cpu)
    device = cpu.autodiff()
    ws = params(rng, device)
    data = [batch(rng, device) for _ in range(2)]
    # Runs of 30 steps that sync at their end only: blocks are cut at matmuls once big enough
    # (ops.starts_block), and from the sync on their cuts fall at the same ops in every run.
    for i in range(30):
        ws, loss = step(ws, *data[i % 2])
    loss.item()
    cpu.sync()
    handles, plans = ember.debug.live_handles(), len(backend.plans)
    for i in range(30):
        ws, loss = step(ws, *data[i % 2])
    loss.item()
    cpu.sync()  # the last update is still pending: nothing has read it yet
    assert ember.debug.live_handles() <= handles
    assert len(backend.plans) == plans
    assert backend.stats()["pending"] == 0


def test_checkpointing_drops_forward_values_and_recomputes_them_in_fused_backward(cpu, rng):
    device = cpu.autodiff(checkpointing="balanced")
    xs, ws = rng.standard_normal((2, 500)).astype(np.float32)
    w = ember.tensor(ws, device=device).require_grad()
    x = ember.tensor(xs, device=device)
    forward = ember.debug.explain(lambda: ((x * w).tanh() * 2).sin().sum())
    assert sum("[kept]" in op for op in forward.ops) == 1  # only the loss: the rest is recomputed
    loss = ((x * w).tanh() * 2).sin().sum()
    holder = {}
    backward = ember.debug.explain(lambda: holder.setdefault("grads", loss.backward()))
    recomputing = [k for k in backward.kernels if any(op.endswith(" tanh") for op in k["ops"])]
    assert recomputing, "the backward kernels should recompute tanh(x * w)"
    t = np.tanh(xs * ws)
    expected = np.cos(2 * t) * 2 * (1 - t * t) * xs
    np.testing.assert_allclose(w.grad(holder["grads"]).numpy(), expected, rtol=1e-4, atol=1e-5)
