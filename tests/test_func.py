"""Higher-order and functional gradients against torch: `backward(create_graph=True)`, `inputs=`,
`Tensor.register_hook`, `ember.checkpoint`, and `ember.func` (grad, vjp, jvp, jacrev, jacfwd, hessian,
vmap) on random inputs of several shapes, odd and empty ones included, in f32 and f64."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch
import torch.func as tf
import torch.nn.attention

import ember
import ember.nn.functional
from ember import func
from ember.autodiff import graph
import tolerances
from conformance.oracle import check, check_grad, sample, to_torch

SHAPES = [(1,), (7,), (2, 5)]


def _f(x, w):
    """A scalar function written once for ember and torch (their method names agree)."""
    h = (x @ w).tanh() * x.sin()
    return (h * h).sum() + (x.exp() * 0.5).sum()


def _vector_f(x):
    """A vector-valued function of a vector or matrix: out.shape == (3,) + x.shape[1:]."""
    return (x.sin() * x.exp()).sum(0) * 2 + x[:1].square().sum() - x.cos()[-1]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_create_graph_gradient_penalty_and_hvp(device, dtype, rng):
    """The gradient from `backward(create_graph=True)` is differentiable: a gradient penalty's and a
    Hessian-vector product's gradients equal torch's, and the first gradient's device carries history."""
    xv, wv, vv = sample((3, 5), dtype, rng, -1, 1), sample((5, 5), dtype, rng, -1, 1), sample((3, 5), dtype, rng)
    ad = device.autodiff()
    x, w = ember.tensor(xv, device=ad).require_grad(), ember.tensor(wv, device=ad).require_grad()
    tx, tw = to_torch(xv).requires_grad_(), to_torch(wv).requires_grad_()
    grads = _f(x, w).backward(create_graph=True)
    gx = x.grad(grads)
    tgx, tgw = torch.autograd.grad(_f(tx, tw), (tx, tw), create_graph=True)
    assert gx.device is ad and gx.requires_grad
    check_grad(gx.detach().inner(), tgx.detach())
    penalty = (gx * gx).sum() + (w.grad(grads) ** 2).sum()
    second = penalty.backward()
    tsecond = torch.autograd.grad((tgx * tgx).sum() + (tgw ** 2).sum(), (tx, tw), retain_graph=True)
    check_grad(x.grad(second), tsecond[0])
    check_grad(w.grad(second), tsecond[1])
    hvp = x.grad((gx * ember.tensor(vv, device=ad)).sum().backward())  # H v by double backward
    check_grad(hvp, torch.autograd.grad((tgx * to_torch(vv)).sum(), tx)[0])
    plain = x.grad(_f(x, w).backward())
    assert plain.device is device and not plain.requires_grad


def test_backward_inputs_gives_intermediate_gradients(device, rng):
    xv = sample((4, 3), "f64", rng)
    x = ember.tensor(xv, device=device.autodiff()).require_grad()
    tx = to_torch(xv).requires_grad_()
    h, th = x.sin() * 3, tx.sin() * 3
    grads = (h.exp() * x).sum().backward(inputs=[h])
    assert h in grads and x not in grads and len(grads) == 1
    check_grad(h.grad(grads), torch.autograd.grad((th.exp() * tx).sum(), th)[0])


def test_hooks_against_torch(device, rng):
    """Hooks on a leaf and an intermediate see the gradient torch's hooks see, replace it in order, and
    `remove()` takes them off; the walk uses the replaced gradient upstream."""
    xv = sample((2, 3), "f32", rng)
    results = {}
    for lib in ("ember", "torch"):
        x = (ember.tensor(xv, device=device.autodiff()).require_grad() if lib == "ember"
             else to_torch(xv).requires_grad_())
        seen = []
        h = x.exp()
        h.register_hook(lambda g: seen.append(np.array(g.numpy() if lib == "ember" else g.detach().numpy())))
        h.register_hook(lambda g: g * 3)
        removed = h.register_hook(lambda g: g * 100)
        removed.remove()
        x.register_hook(lambda g: g - 1)
        loss = (h * h).sum()
        if lib == "ember":
            results[lib] = (x.grad(loss.backward()).numpy(), seen)
        else:
            loss.backward()
            results[lib] = (x.grad.numpy(), seen)
    np.testing.assert_allclose(results["ember"][0], results["torch"][0], rtol=1e-5)
    np.testing.assert_allclose(results["ember"][1][0], results["torch"][1][0], rtol=1e-5)


def test_hook_errors(device):
    x = ember.ones(3, device=device.autodiff()).require_grad()
    with pytest.raises(RuntimeError, match="no gradient history"):
        ember.ones(3, device=device).register_hook(lambda g: g)
    (x * 2).register_hook(lambda g: g.sum())
    y = x * 2
    y.register_hook(lambda g: g.sum())
    with pytest.raises(ember.ShapeError, match=r"register_hook.*shape \(\)"):
        y.sum().backward()


def _block(w1, w2):
    return lambda h: ((h @ w1).tanh() @ w2).sin() + h


def _kept_values(roots) -> int:
    """How many values the graph of `roots` holds strongly for its rules (outputs and saved inputs)."""
    nodes = graph.topological_order([r._handle.node for r in roots])
    return sum((type(n._value) is not weakref.ref) + len(n.saved or ()) for n in nodes if n.prim is not None)


def test_checkpoint_gradients_equal_and_fewer_values_kept(device, rng):
    """Four checkpointed blocks give the unchecked gradients (their parameters are closed over), keep
    fewer values for backward, and hold none of the blocks' intermediates once the call returns."""
    ad = device.autodiff()
    xv = sample((3, 6), "f64", rng, -1, 1)
    wv = [sample((6, 6), "f64", rng, -0.5, 0.5) for _ in range(8)]
    runs = {}
    for mode in ("plain", "checkpoint"):
        x = ember.tensor(xv, device=ad).require_grad()
        ws = [ember.tensor(v, device=ad).require_grad() for v in wv]
        h = x
        for i in range(4):
            block = _block(ws[2 * i], ws[2 * i + 1])
            h = ember.checkpoint(block, h) if mode == "checkpoint" else block(h)
        loss = (h * h).sum()
        kept = _kept_values([loss])
        grads = loss.backward()
        runs[mode] = kept, [x.grad(grads).numpy()] + [w.grad(grads).numpy() for w in ws]
    assert runs["checkpoint"][0] < runs["plain"][0] / 2, (runs["checkpoint"][0], runs["plain"][0])
    for a, b in zip(runs["checkpoint"][1], runs["plain"][1]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)

    inside = []

    def traced(h):
        t = (h @ ember.tensor(wv[0], device=ad)).tanh()
        inside.append(weakref.ref(t._handle.primal))
        return t.sin()

    x = ember.tensor(xv, device=ad).require_grad()
    y = ember.checkpoint(traced, x)
    gc.collect()
    assert inside[0]() is None  # the call's intermediate is not kept
    np.testing.assert_allclose(x.grad(y.sum().backward()).numpy(), x.grad(traced(x).sum().backward()).numpy(),
                               rtol=1e-12)


def test_checkpoint_tuple_outputs_create_graph_and_passthrough(device, rng):
    ad = device.autodiff()
    xv, wv = sample((2, 4), "f64", rng), sample((4, 4), "f64", rng, -0.5, 0.5)
    x, w = ember.tensor(xv, device=ad).require_grad(), ember.tensor(wv, device=ad).require_grad()

    def two(h):
        return (h @ w).sin(), h.exp()

    a, b = ember.checkpoint(two, x)
    ta, tb = two(x)
    grads = ((a * b).sum() * 2).backward(create_graph=True)
    tgrads = ((ta * tb).sum() * 2).backward(create_graph=True)
    for t in (x, w):
        np.testing.assert_allclose(t.grad(grads).numpy(), t.grad(tgrads).numpy(), rtol=1e-12)
    second, tsecond = x.grad(grads).sum().backward(), x.grad(tgrads).sum().backward()  # through the rerun
    np.testing.assert_allclose(w.grad(second).numpy(), w.grad(tsecond).numpy(), rtol=1e-12)
    with ember.no_grad():
        assert not ember.checkpoint(two, x)[0].requires_grad
    drop = lambda h: ember.nn.functional.dropout((h @ w).sin(), 0.5) * h  # noqa: E731
    ember.seed(3)
    checked = x.grad(ember.checkpoint(drop, x).sum().backward())
    ember.seed(3)
    np.testing.assert_array_equal(checked.numpy(), x.grad(drop(x).sum().backward()).numpy())  # the same mask
    with pytest.raises(ember.EmberError, match="checkpoint: fn must return"):
        ember.checkpoint(lambda h: 3, x)


def _check_tree(actual, expected, dtype):
    if isinstance(expected, torch.Tensor):
        check_grad(actual, expected.detach(), dtype)
        return
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        _check_tree(a, e, dtype)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_func_transforms_against_torch_func(device, dtype, rng):
    """grad, grad_and_value, vjp, jvp, jacrev, jacfwd, hessian on several shapes, argnums tuples, aux and
    nesting, with plain inputs (results on the plain device, no history) and autodiff ones (kept)."""
    for i, shape in enumerate(SHAPES):
        xv, wv = sample(shape, dtype, rng, -1, 1), sample(shape[-1:] * 2, dtype, rng, -1, 1)
        tx, tw = to_torch(xv), to_torch(wv)
        for where in [(device, device.autodiff())[i % 2]]:
            x, w = ember.tensor(xv, device=where), ember.tensor(wv, device=where)
            g = func.grad(lambda a, b, scale: _f(a, b) * scale, argnums=(0, 1))(x, w, scale=1.0)
            assert g[0].device is where and g[0].requires_grad is where.is_autodiff
            _check_tree(g, tf.grad(_f, argnums=(0, 1))(tx, tw), dtype)
            (gv, (value, aux)) = func.grad_and_value(lambda a: (_f(a, w), a.sum()), has_aux=True)(x)
            tgv, (tvalue, taux) = tf.grad_and_value(lambda a: (_f(a, tw), a.sum()), has_aux=True)(tx)
            _check_tree([gv, value, aux], [tgv, tvalue, taux], dtype)
            out, back = func.vjp(lambda a, b: (_vector_f(a), a @ b), x, w)
            tout, tback = tf.vjp(lambda a, b: (_vector_f(a), a @ b), tx, tw)
            cts = [sample(o.shape, dtype, rng) for o in tout]
            _check_tree(out, tout, dtype)
            _check_tree(back(tuple(ember.tensor(c, device=where) for c in cts)),
                        tback(tuple(to_torch(c) for c in cts)), dtype)
            tv = sample(shape, dtype, rng)
            _check_tree(func.jvp(_vector_f, (x,), (ember.tensor(tv, device=where),)),
                        tf.jvp(_vector_f, (tx,), (to_torch(tv),)), dtype)
            _check_tree([func.jacrev(_vector_f)(x), func.jacfwd(_vector_f)(x)],
                        [tf.jacrev(_vector_f)(tx), tf.jacfwd(_vector_f)(tx)], dtype)
            _check_tree(func.hessian(_f, argnums=1)(x, w), tf.hessian(_f, argnums=1)(tx, tw), dtype)
            third = func.grad(func.grad(func.grad(lambda s: (s.sin() * s.exp()).sum())))
            tthird = tf.grad(tf.grad(tf.grad(lambda s: (s.sin() * s.exp()).sum())))
            _check_tree(third(x[:1].sum()), tthird(tx[:1].sum()), dtype)


def test_func_results_are_differentiable_on_autodiff_devices(device, rng):
    """MAML's inner step: the inner gradient (by func.grad on an autodiff device) keeps history to the
    parameters, so the outer loss's gradient equals torch's second-order one."""
    wv, xv = sample((3, 3), "f64", rng, -1, 1), sample((4, 3), "f64", rng, -1, 1)
    w = ember.tensor(wv, device=device.autodiff()).require_grad()
    x = ember.tensor(xv, device=device)
    inner = lambda p: ((x @ p).tanh() ** 2).sum()  # noqa: E731
    adapted = w - 0.1 * func.grad(inner)(w)
    outer = ((x @ adapted).sin()).sum()
    tw, tx = to_torch(wv).requires_grad_(), to_torch(xv)
    tinner = ((tx @ tw).tanh() ** 2).sum()
    tadapted = tw - 0.1 * torch.autograd.grad(tinner, tw, create_graph=True)[0]
    check_grad(w.grad(outer.backward()), torch.autograd.grad((tx @ tadapted).sin().sum(), tw)[0])


def test_jacobians_of_empty_and_unreached(device):
    x = ember.zeros(0, device=device)
    check(func.jacrev(lambda a: a * 2)(x), torch.zeros(0, 0))
    check(func.jacfwd(lambda a: a.sum().reshape(1))(x), torch.zeros(1, 0))
    y = ember.ones(2, device=device)
    check(func.grad(lambda a, b: (b * 2).sum())(y, y), torch.zeros(2))  # unreached: zeros, as torch.func
    check(func.jacrev(lambda a: ember.ones(3, device=device))(y), torch.zeros(3, 2))
    check(func.jvp(lambda a: ember.ones(3, device=device), (y,), (y,))[1], torch.zeros(3))


def test_func_errors(device):
    x = ember.ones(2, 3, device=device)
    with pytest.raises(ember.ShapeError, match=r"grad: f must return a tensor of one element.*\(2, 3\)"):
        func.grad(lambda a: a * 2)(x)
    with pytest.raises(ember.EmberError, match="argnums 2 is out of range"):
        func.grad(lambda a: a.sum(), argnums=2)(x)
    with pytest.raises(ember.ShapeError, match=r"vjp: a cotangent of shape \(3,\)"):
        func.vjp(lambda a: a * 2, x)[1](ember.ones(3, device=device))
    with pytest.raises(ember.ShapeError, match="different batch sizes"):
        func.vmap(lambda a, b: a + b)(x, ember.ones(3, 3, device=device))
    with pytest.raises(ember.ShapeError, match="in_dim 2 is out of range"):
        func.vmap(lambda a: a, in_dims=2)(x)
    with pytest.raises(ember.ShapeError, match="batch has size 0"):
        func.vmap(lambda a: a)(ember.ones(0, 3, device=device))


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_vmap_against_torch_func(device, dtype, rng):
    """in_dims (ints, negative, None) and out_dims, tuple outputs, and per-example gradients
    (vmap(grad(f))), on odd batch sizes."""
    av, bv, wv = sample((5, 3), dtype, rng), sample((3, 4, 5), dtype, rng), sample((3,), dtype, rng)
    a, b, w = (ember.tensor(v, device=device) for v in (av, bv, wv))
    ta, tb, tw = (to_torch(v) for v in (av, bv, wv))

    def f(p, q, r):
        return (p * r).sin() @ q, (p.exp() * r).sum()

    got = func.vmap(f, in_dims=(0, -1, None), out_dims=(1, 0))(a, b, w)
    want = tf.vmap(f, in_dims=(0, -1, None), out_dims=(1, 0))(ta, tb, tw)
    _check_tree(got, want, dtype)
    per_example = func.vmap(func.grad(lambda p, r: ((p * r).tanh() ** 2).sum()), in_dims=(0, None))(a, w)
    _check_tree(per_example, tf.vmap(tf.grad(lambda p, r: ((p * r).tanh() ** 2).sum()), in_dims=(0, None))(ta, tw),
                dtype)
    jac = func.vmap(func.jacrev(lambda p: p.sin() * p.sum()))(a)
    _check_tree(jac, tf.vmap(tf.jacrev(lambda p: p.sin() * p.sum()))(ta), dtype)
    # gradients flow through vmap on an autodiff device
    x = ember.tensor(av, device=device.autodiff()).require_grad()
    tx = ta.clone().requires_grad_()
    grads = func.vmap(lambda p: (p.sin() * w).sum())(x).square().sum().backward()
    tf.vmap(lambda p: (p.sin() * tw).sum())(tx).square().sum().backward()
    check_grad(x.grad(grads), tx.grad)


def _second_order_cases(F, lib, idx):
    """(name, f, input shapes): ops whose gradient rules the double backward records, written once for
    ember (`lib` ember, `F` ember.nn.functional) and torch; `idx` is an integer tensor of the library."""
    return [
        ("conv2d", lambda x, w, b: F.conv2d(x, w, b, stride=(1, 2), padding=1), [(1, 2, 5, 6), (3, 2, 3, 3), (3,)]),
        ("conv_transpose2d", lambda x, w: F.conv_transpose2d(x, w, stride=2), [(1, 2, 3, 4), (2, 3, 3, 3)]),
        ("pools", lambda x: F.max_pool2d(x, 2) * F.avg_pool2d(x, 2), [(1, 2, 5, 7)]),
        ("norms", lambda x, w, b: F.layer_norm(x, (5,), w, b) + F.group_norm(x.reshape(3, 5, 1), 5).reshape(3, 5),
         [(3, 5), (5,), (5,)]),
        ("softmaxes", lambda x: F.softmax(x, dim=-1) * F.log_softmax(x, dim=0) + F.gelu(x) * F.silu(x), [(3, 5)]),
        ("losses", lambda x, y: F.cross_entropy(x, idx[:, 0]) + F.mse_loss(x, y) + F.softplus(x).sum(), [(4, 5), (4, 5)]),
        ("attention", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
         [(1, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3, 4)]),
        ("embedding_gather", lambda w: F.embedding(idx, w).exp() + w.gather(0, idx[:, :3] % 3).sin(), [(5, 3)]),
        ("scans", lambda x: x.cumsum(0) * x.cumprod(1) + x.prod(0) + lib.logsumexp(x, 1).unsqueeze(1), [(3, 4)]),
        ("binary", lambda x, y: (x.abs() + 1) ** y + x / (y.abs() + 1) + lib.atan2(x, y) + lib.maximum(x, y)
         + lib.where(x > y, x * y, x.exp()), [(2, 3), (2, 3)]),
        ("reductions", lambda x: x.var(0) * x.std(1).sum() + x.norm() + x.amax(1).sum() * x.mean(), [(3, 4)]),
        ("linalg", lambda a, b: lib.einsum("bij,jk->bik", a, b) @ b.T + (a[:, :, ::2] * 2).sum(), [(2, 3, 4), (4, 5)]),
        ("sort", lambda x: x.sort(dim=-1)[0] * x.topk(2, dim=-1)[0].sum(-1, keepdim=True), [(3, 5)]),
    ]


@pytest.mark.parametrize("case", range(13))
def test_double_backward_through_every_rule_family(device, case, rng):
    """grad of <grad(<f, c>), v> against torch for each family of ops: every rule that backward runs is
    written with recorded ops, so its second derivative is right (not a silent zero)."""
    import ember.nn.functional as enn
    idx = rng.integers(0, 5, (4, 4))
    name, f, shapes = _second_order_cases(enn, ember, ember.tensor(idx, device=device.autodiff()))[case]
    tf_ = _second_order_cases(torch.nn.functional, torch, torch.from_numpy(idx))[case][1]
    dt = "f32" if device.kind == "wgpu" else "f64"  # WGSL has no f64; f32 still reaches its fused kernels
    values = [sample(s, dt, rng, -1, 1) for s in shapes]
    xs = [ember.tensor(v, device=device.autodiff()).require_grad() for v in values]
    txs = [to_torch(v).requires_grad_() for v in values]
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):  # the one with double backward
        out, tout = f(*xs), tf_(*txs)
    c, vs = sample(tout.shape, dt, rng), [sample(s, dt, rng) for s in shapes]
    grads = (out * ember.tensor(c, device=device)).sum().backward(create_graph=True)
    firsts = [x.grad(grads) for x in xs]
    tfirsts = torch.autograd.grad((tout * to_torch(c)).sum(), txs, create_graph=True)
    for g, tg in zip(firsts, tfirsts):
        check_grad(g.detach().inner(), tg.detach())
    inner = sum((g * ember.tensor(v, device=device)).sum() for g, v in zip(firsts, vs))
    second = inner.backward()  # GPU targets' fused gradient kernels give way to composed rules here
    tsecond = torch.autograd.grad(sum((tg * to_torch(v)).sum() for tg, v in zip(tfirsts, vs)), txs,
                                  allow_unused=True, materialize_grads=True)
    for x, tg in zip(xs, tsecond):
        got = x.grad(second)
        check(got if got is not None else ember.zeros(*x.shape, dtype=dt, device=device), tg, tol=tolerances.second(dt))
