"""Autodiff: leaves, `backward()` and `Gradients`, detach, no_grad, accumulation, a deep MLP against
torch autograd, and checkpointing giving the same gradients as keeping everything."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import ember
from ember import Device
from conformance.oracle import check, check_grad, sample, to_torch


def test_require_grad_and_gradients(device):
    ad = device.autodiff()
    x = ember.tensor([1.0, 2.0, 3.0], device=device).require_grad()
    assert x.requires_grad and x.device is ad  # lifted onto the autodiff variant
    y = ember.tensor([4.0, 5.0, 6.0], device=ad)
    assert not y.requires_grad
    grads = (x * y).sum().backward()
    assert isinstance(grads, ember.Gradients) and len(grads) == 1
    g = x.grad(grads)
    assert g.device is device and not g.requires_grad  # gradients live on the inner device
    assert g.tolist() == [4.0, 5.0, 6.0]
    assert x in grads
    with pytest.raises(ValueError, match="not tracked"):
        y.grad(grads)
    assert grads.remove(x).tolist() == [4.0, 5.0, 6.0]
    assert x not in grads and x.grad(grads) is None and grads.remove(x) is None
    assert "Gradients" in repr(grads)


def test_unreached_leaf_has_no_gradient(device):
    a = ember.ones(2, device=device).require_grad()
    b = ember.ones(2, device=device).require_grad()
    grads = (a * 3).sum().backward()
    assert b.grad(grads) is None and a.grad(grads).tolist() == [3.0, 3.0]


def test_non_float_require_grad(device):
    for dtype in ("i64", "i32", "u8", "bool"):
        with pytest.raises(TypeError, match=dtype):
            ember.zeros(2, dtype=dtype, device=device).require_grad()


def test_detach_and_no_grad(device):
    x = ember.tensor([1.0, 2.0], device=device).require_grad()
    d = x.detach()
    assert not d.requires_grad and d.tolist() == x.tolist() and d.device is x.device
    grads = (x * d).sum().backward()
    assert x.grad(grads).tolist() == [1.0, 2.0]  # d is a constant
    with ember.no_grad():
        assert not ember.grad_enabled()
        y = x * 2
    assert ember.grad_enabled()
    assert not y.requires_grad
    with pytest.raises(RuntimeError, match="no gradient history"):
        y.sum().backward()
    assert x.inner().device is device and not x.inner().requires_grad


def test_no_grad_is_per_thread(device):
    x = ember.ones(2, device=device).require_grad()
    seen = {}

    def other():
        seen["tracked"] = (x * 2).requires_grad

    with ember.no_grad():
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen["tracked"] is True


def test_accumulation_when_used_twice(device, rng):
    xv = sample((3, 4), "f64", rng)
    x = ember.tensor(xv, device=device).require_grad()
    tx = to_torch(xv).requires_grad_()
    out = x * x + x.exp() * x[:, :1] + (x @ x.T).sum(dim=0, keepdim=True).T
    tout = tx * tx + tx.exp() * tx[:, :1] + (tx @ tx.T).sum(dim=0, keepdim=True).T
    grads = out.sum().backward()
    tout.sum().backward()
    check_grad(x.grad(grads), tx.grad)


def test_backward_with_seed_and_twice(device, rng):
    xv = sample((2, 3), "f32", rng)
    x = ember.tensor(xv, device=device).require_grad()
    y = x.sin() * 3
    seed = sample((2, 3), "f32", rng)
    g1 = x.grad(y.backward(ember.tensor(seed, device=device)))
    g2 = x.grad(y.backward(ember.tensor(seed, device=device)))  # the graph can be walked again
    np.testing.assert_allclose(g1.numpy(), np.cos(xv) * 3 * seed, rtol=1e-5)
    assert g1.tolist() == g2.tolist()
    # gradients are independent per backward: no accumulation across calls
    assert x.grad(y.sum().backward()).tolist() == x.grad(y.sum().backward()).tolist()
    # a tensor of one element, 0-d or not, is seeded with 1 as a loss is
    want = np.zeros((2, 3), np.float32)
    want[0, 1] = np.cos(xv[0, 1]) * 3
    np.testing.assert_allclose(x.grad(y[:1, 1:2].backward()).numpy(), want, rtol=1e-5)


def test_plain_tensor_lifted_into_autodiff_op(device):
    w = ember.ones(2, device=device).require_grad()
    lr, g = 0.5, ember.ones(2, device=device)
    w2 = w - lr * g  # g lives on the plain device: lifted, as in an optimizer step
    assert w2.requires_grad and w2.device is device.autodiff()
    assert w.grad((w2 * w2).sum().backward()).tolist() == [1.0, 1.0]


def _mlp_weights(rng, layers, width, dtype):
    scale = 1 / float(np.sqrt(width))  # a Python float keeps the dtype of the samples
    return [(sample((width, width), dtype, rng, -scale, scale), sample((width,), dtype, rng, -0.1, 0.1))
            for _ in range(layers)]


def _ember_mlp(weights, x, device):
    params = [(ember.tensor(w, device=device).require_grad(), ember.tensor(b, device=device).require_grad())
              for w, b in weights]
    h = ember.tensor(x, device=device)
    for i, (w, b) in enumerate(params):
        h = h @ w + b
        h = ember.activation.gelu(h) if i % 2 else h.tanh()
    return params, (h * h).mean()


def _torch_mlp(weights, x):
    params = [(to_torch(w).requires_grad_(), to_torch(b).requires_grad_()) for w, b in weights]
    h = to_torch(x)
    for i, (w, b) in enumerate(params):
        h = h @ w + b
        h = torch.nn.functional.gelu(h) if i % 2 else h.tanh()
    return params, (h * h).mean()


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_deep_mlp_against_torch(dtype, device, rng):
    weights, x = _mlp_weights(rng, 20, 16, dtype), sample((8, 16), dtype, rng)
    params, loss = _ember_mlp(weights, x, device)
    tparams, tloss = _torch_mlp(weights, x)
    check(loss.inner(), tloss.detach())
    grads = loss.backward()
    tloss.backward()
    assert len(grads) == 40
    for (w, b), (tw, tb) in zip(params, tparams):
        check_grad(w.grad(grads), tw.grad)
        check_grad(b.grad(grads), tb.grad)


def test_checkpointing_gives_identical_gradients(device, rng):
    weights, x = _mlp_weights(rng, 20, 16, "f64"), sample((8, 16), "f64", rng)
    params, loss = _ember_mlp(weights, x, device.autodiff())
    grads = loss.backward()
    cparams, closs = _ember_mlp(weights, x, device.autodiff(checkpointing="balanced"))
    assert closs.device.checkpointing == "balanced"
    cgrads = closs.backward()
    assert closs.item() == loss.item()
    for (w, b), (cw, cb) in zip(params, cparams):
        np.testing.assert_array_equal(cw.grad(cgrads).numpy(), w.grad(grads).numpy())
        np.testing.assert_array_equal(cb.grad(cgrads).numpy(), b.grad(grads).numpy())


def test_checkpointing_recomputes_dropped_values(device, rng, monkeypatch):
    """With the intermediate tensors gone, balanced checkpointing recomputes them and still agrees."""
    import weakref

    from ember.autodiff import graph

    recomputed = []
    primal = graph.Node.primal

    def counting_primal(node):
        if type(node._value) is weakref.ref and node._value() is None:
            recomputed.append(node.prim.name)
        return primal(node)

    monkeypatch.setattr(graph.Node, "primal", counting_primal)
    xv = sample((4, 5), "f64", rng)
    results = []
    for ad in (device.autodiff(), device.autodiff(checkpointing="balanced")):
        recomputed.clear()
        x = ember.tensor(xv, device=ad).require_grad()

        def forward(x):
            a = x.sin() * 2  # cheap ops: not kept under checkpointing
            b = a.exp() + a[:, ::-1]
            return (b @ b.T).sum()  # costly: kept

        loss = forward(x)  # the intermediates die with the function's frame
        results.append(x.grad(loss.backward()).numpy().copy())
        assert bool(recomputed) == (ad.checkpointing == "balanced"), recomputed
        assert "matmul" not in recomputed  # costly ops are kept
    np.testing.assert_array_equal(results[0], results[1])
    tx = to_torch(xv).requires_grad_()
    a = tx.sin() * 2
    b = a.exp() + a.flip(1)
    (b @ b.T).sum().backward()
    np.testing.assert_allclose(results[1], tx.grad.numpy(), rtol=1e-10)


def test_deep_chain_does_not_recurse(device):
    x = ember.tensor([0.5], device=device).require_grad()
    y = x
    for _ in range(3000):  # deeper than Python's recursion limit
        y = y * 1.0001
    g = x.grad(y.sum().backward())
    np.testing.assert_allclose(g.numpy(), [1.0001 ** 3000], rtol=1e-4)


def test_gradient_on_other_device_kind_is_not_shared():
    x = ember.ones(2, device=Device.numpy()).require_grad()
    moved = x.to(Device.cpu())
    assert not moved.requires_grad  # crossing devices goes through the host, without history


def test_assignment_into_a_leaf_is_refused(device):
    """As in PyTorch: rebinding a leaf would make its gradient unreachable, so it is an error."""
    x = ember.ones(3, device=device).require_grad()
    with pytest.raises(RuntimeError, match="leaf"):
        x[0] = 5.0
    y = x * 1
    y[0] = 5.0  # a copy can be assigned into; the gradient reaches x where y was not overwritten
    assert x.grad((y * y).sum().backward()).tolist() == [0.0, 2.0, 2.0]
    z = ember.ones(3, device=device.autodiff())  # untracked tensors on an autodiff device are fine
    z[0] = 2.0
    assert z.tolist() == [2.0, 1.0, 1.0]


def _transformer_loss(nn, ops, w, idx, target, fused_attention: bool):
    """A pre-norm transformer block with an embedding, causal attention, a GELU MLP and cross entropy,
    written once for ember and torch (`nn`: the functional module, `ops`: the framework's namespace)."""
    x = nn.embedding(idx, w["emb"])
    h = nn.layer_norm(x, (8,), w["g1"], w["b1"])
    q, k, v = (h @ w["qkv"]).reshape(2, 6, 3, 2, 4).permute(2, 0, 3, 1, 4)
    a = nn.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + a.permute(0, 2, 1, 3).reshape(2, 6, 8) @ w["out"]
    x = x + nn.gelu(nn.layer_norm(x, (8,), w["g2"], w["b2"]) @ w["fc"]) @ w["proj"]
    return nn.cross_entropy((x @ w["head"]).reshape(12, 5), target)


@pytest.mark.parametrize("fused_attention", [False, True])
def test_kept_values_cover_every_rule(device, rng, monkeypatch, fused_attention):
    """Autodiff keeps only what the rules read (`Primitive.saves`); a rule reading anything else would
    recompute it. A transformer block's rules never do, and the gradients agree with torch."""
    import ember.nn.attention as attention
    import ember.nn.functional as enn
    from ember.autodiff import graph
    monkeypatch.setattr(attention, "CPU_FUSED_MIN_SCORES", 0 if fused_attention else 1 << 24)
    recomputed = []
    recompute = graph.Node._recompute
    monkeypatch.setattr(graph.Node, "_recompute", lambda node: recomputed.append(node.prim.name) or recompute(node))
    shapes = dict(emb=(5, 8), g1=(8,), b1=(8,), qkv=(8, 24), out=(8, 8), g2=(8,), b2=(8,), fc=(8, 16),
                  proj=(16, 8), head=(8, 5))
    values = {name: sample(shape, "f64", rng) for name, shape in shapes.items()}
    idx, target = rng.integers(0, 5, (2, 6)), rng.integers(0, 5, 12)
    weights = {name: ember.tensor(v, device=device.autodiff()).require_grad() for name, v in values.items()}
    loss = _transformer_loss(enn, ember, weights, ember.tensor(idx, device=device.autodiff()),
                             ember.tensor(target, device=device.autodiff()), fused_attention)
    grads = loss.backward()  # the intermediates died with the function's frame
    assert recomputed == []
    tw = {name: to_torch(v).requires_grad_() for name, v in values.items()}
    _transformer_loss(torch.nn.functional, torch, tw, torch.from_numpy(idx), torch.from_numpy(target),
                      fused_attention).backward()
    for name in values:
        check_grad(weights[name].grad(grads), tw[name].grad)


def test_backward_releases_what_the_graph_kept(device, rng):
    """Values kept for the rules are released by the walk that used them (the loss and its graph may
    stay alive: the optimizer step runs after it); a second walk recomputes them and agrees."""
    import weakref

    from ember.autodiff import graph
    x = ember.tensor(sample((3, 4), "f32", rng), device=device.autodiff()).require_grad()
    w = ember.tensor(sample((4, 4), "f32", rng), device=device.autodiff()).require_grad()
    h = (x @ w).exp()       # exp keeps its output
    loss = (h * 2).sum()    # ... which is all of h's value anything keeps
    kept = weakref.ref(h._handle.primal)
    del h
    assert kept() is not None
    g1 = w.grad(loss.backward())
    assert kept() is None
    assert all(type(n._value) is weakref.ref for n in graph.topological_order(loss._handle.node) if n.prim)
    g2 = w.grad(loss.backward())
    assert g1.tolist() == g2.tolist()
    tx, tw = (to_torch(t.numpy()).requires_grad_() for t in (x, w))
    ((tx @ tw).exp() * 2).sum().backward()
    check_grad(g1, tw.grad)


def test_backward_lets_go_of_a_leaf_value_that_its_tensor_no_longer_holds(device, rng):
    """After a walk the graph and the `Gradients` hold a leaf's value only through its tensor: a parameter
    replaced by an optimizer step is freed at once (its memory can be written over:
    ember/backend/cube/fused/donation.py), though the loss and the gradients stay alive. A walk before the
    replacement works again; one after it raises, naming the cause."""
    import weakref

    w = ember.tensor(sample((4, 3), "f32", rng), device=device.autodiff()).require_grad()
    x = ember.tensor(sample((2, 4), "f32", rng), device=device.autodiff())
    loss = (x @ w).tanh().sum()
    grads = loss.backward()
    again = loss.backward()
    np.testing.assert_array_equal(w.grad(grads).numpy(), w.grad(again).numpy())
    old = weakref.ref(w._handle.primal)
    w = (w - 0.1 * w.grad(grads)).detach().require_grad()  # the update: the old value's tensor is gone
    assert old() is None and len(grads) == 1
    with pytest.raises(RuntimeError, match="leaf tensor this graph reads is gone"):
        loss.backward()


def test_forward_keeps_what_backward_reads_and_the_walk_frees_it():
    """Measured in the CPU device's pool: a GELU MLP's forward keeps two hidden-sized values (the GELU's
    input and the output the second matmul's gradient reads; PyTorch keeps the same), not the scaled
    matmul output nor the GELU's intermediates, and the backward walk frees them though the loss stays
    alive. (The hidden values are kernel outputs, which the pool counts; small BLAS products are not.)"""
    import gc
    device = Device.cpu()
    ad = device.autodiff()
    rng = np.random.default_rng(0)
    x = ember.tensor(rng.standard_normal((64, 32), dtype=np.float32), device=ad)
    w1 = ember.tensor(rng.standard_normal((32, 128), dtype=np.float32), device=ad).require_grad()
    w2 = ember.tensor(rng.standard_normal((128, 32), dtype=np.float32), device=ad).require_grad()

    def forward():
        return (ember.activation.gelu((x @ w1) * 0.5) @ w2).square().sum()

    forward().backward()  # kernels compiled, constants cached
    gc.collect()
    device.sync()
    before = device.memory_stats().in_use
    loss = forward()
    device.sync()
    hidden = 64 * 128 * 4
    kept = device.memory_stats().in_use - before
    assert 2 * hidden <= kept < 3 * hidden, kept / hidden
    grads = loss.backward()
    assert w1.grad(grads).shape == (32, 128)
    del grads
    gc.collect()
    device.sync()
    assert device.memory_stats().in_use - before < hidden // 4
