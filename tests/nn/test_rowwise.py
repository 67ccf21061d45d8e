"""Softmax, log-softmax, layer norm and RMS norm as one op each on a GPU cube target (ember/api/rowwise.py):
the tensor API routes to them on wgpu (lavapipe here) over the last dim only, and their outputs and
gradients (input, weight, bias) match torch; their NumPy references match torch too."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import ember
from ember import activation as F
from ember.cube.runtime.wgpu import wgpu_available
from ember.nn.loss import cross_entropy
from ember.nn.norm import layer_norm, rms_norm
from ember.api import rowwise
from ops.torch_check import check_op, random

needs_wgpu = pytest.mark.skipif(not wgpu_available()[0], reason=f"no wgpu adapter: {wgpu_available()[1]}")


@pytest.fixture
def calls(monkeypatch):
    """Counts of the calls of the one-op softmax and norm (which still run)."""
    counts = {"softmax_rows": 0, "norm_rows": 0}
    for name in counts:
        op = getattr(rowwise, name)

        def counted(*args, op=op, name=name, **params):
            counts[name] += 1
            return op(*args, **params)
        monkeypatch.setattr(rowwise, name, counted)
    return counts


@needs_wgpu
def test_routed_only_over_the_last_dim_of_float_tensors_on_gpu_targets(calls, rng):
    x = ember.tensor(random(rng, (3, 4, 5), "f32"), device=ember.Device.wgpu())
    F.softmax(x, -1), F.log_softmax(x, 2)
    assert calls["softmax_rows"] == 2
    F.softmax(x, 1)  # another dim: the composition
    F.softmax(x.to(ember.Device.cpu()), -1)  # the C target keeps its composition
    assert calls["softmax_rows"] == 2
    layer_norm(x, (4, 5)), rms_norm(x, 5)
    layer_norm(x, 5, ember.tensor(np.ones(5, np.float64), device=x.device))  # a weight of another dtype
    assert calls["norm_rows"] == 2
    assert not rowwise.routes(ember.tensor(np.zeros((0, 3), np.float32), device=x.device))


@needs_wgpu
@pytest.mark.parametrize("shape", [(2, 3, 40), (3, 300)])
def test_softmax_output_and_gradient_match_torch(calls, rng, shape):
    x = random(rng, shape, "f32") * 4
    device = ember.Device.wgpu()
    check_op(lambda t: F.softmax(t, -1), lambda t: torch.softmax(t, -1), [x], device, rng=rng)
    check_op(lambda t: F.log_softmax(t, -1), lambda t: torch.log_softmax(t, -1), [x], device, rng=rng)
    assert calls["softmax_rows"] == 2


@needs_wgpu
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
def test_layer_norm_output_and_gradients_match_torch(calls, rng, affine):
    x, w, b = random(rng, (2, 3, 4, 10), "f32") * 3 + 1, random(rng, (4, 10), "f32"), random(rng, (4, 10), "f32")
    device = ember.Device.wgpu()
    if affine == "both":
        check_op(lambda t, w, b: layer_norm(t, (4, 10), w, b), lambda t, w, b: TF.layer_norm(t, (4, 10), w, b),
                 [x, w, b], device, grads=(0, 1, 2), rng=rng)
    elif affine == "weight":
        check_op(lambda t, w: layer_norm(t, (4, 10), w), lambda t, w: TF.layer_norm(t, (4, 10), w),
                 [x, w], device, grads=(0, 1), rng=rng)
    else:
        check_op(lambda t: layer_norm(t, 10, eps=0.1), lambda t: TF.layer_norm(t, (10,), eps=0.1), [x], device,
                 rng=rng)
    assert calls["norm_rows"] == 1


@needs_wgpu
def test_rms_norm_output_and_gradients_match_torch(calls, rng):
    x, w = random(rng, (6, 70), "f32") * 2, random(rng, 70, "f32")
    check_op(lambda t, w: rms_norm(t, 70, w, 1e-5), lambda t, w: TF.rms_norm(t, (70,), w, 1e-5), [x, w],
             ember.Device.wgpu(), grads=(0, 1), rng=rng)
    assert calls["norm_rows"] == 1


def test_references_match_torch(rng):
    x, w, b = random(rng, (4, 9)), random(rng, 9), random(rng, 9)
    t = torch.from_numpy(x)
    np.testing.assert_allclose(rowwise._softmax_reference(x, log=True), torch.log_softmax(t, -1), rtol=1e-12)
    np.testing.assert_allclose(rowwise._softmax_reference(x, log=False), torch.softmax(t, -1), rtol=1e-12)
    got = rowwise._norm_reference(x, w, b, eps=1e-5, rms=False, has_weight=True, has_bias=True)
    np.testing.assert_allclose(got, TF.layer_norm(t, (9,), torch.from_numpy(w), torch.from_numpy(b)), rtol=1e-10)
    got = rowwise._norm_reference(x, w, x, eps=1e-6, rms=True, has_weight=True, has_bias=False)
    np.testing.assert_allclose(got, TF.rms_norm(t, (9,), torch.from_numpy(w), 1e-6), rtol=1e-10)


def test_the_ops_are_recorded_by_the_fusion_layer_and_check_their_operands_at_the_call(rng):
    """`pure=True`: on a fused device the ops join the pending block (no flush at the call), so their
    rules check all the kernels would: a bad operand raises where the op is called, not at a later sync."""
    device = ember.Device.cpu()
    backend = ember.debug.fusion_backend(device)
    x = ember.tensor(rng.standard_normal((6, 40)).astype(np.float32), device=device)
    w = ember.ones(40, device=device)
    g = (x * 3.0).exp()
    flushes = backend.stats()["flushes"]
    y = rowwise.softmax_rows(g, log=True)
    dy = rowwise.softmax_rows_grad(y, x, log=True)
    z = rowwise.norm_rows(x, w, w, eps=1e-5, rms=False, has_weight=True, has_bias=True)
    dz = rowwise.norm_rows_grad(x, w, z, eps=1e-5, rms=False, has_weight=True)
    assert backend.stats()["flushes"] == flushes and backend.stats()["pending"] >= 5
    np.testing.assert_allclose(dz.numpy(), rowwise._norm_grad_reference(
        x.numpy(), w.numpy(), z.numpy(), eps=1e-5, rms=False, has_weight=True), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dy.numpy(), rowwise._softmax_grad_reference(y.numpy(), x.numpy(), log=True),
                               rtol=1e-4, atol=1e-5)
    with pytest.raises(ember.errors.ShapeError, match=r"one shape, got \(6, 40\), \(6, 39\)"):
        rowwise.softmax_rows_grad(y, x[:, :39], log=True)
    with pytest.raises(ember.errors.DTypeError, match="one float dtype, got f32, f64"):
        rowwise.norm_rows_grad(x, w, x.cast(ember.f64), eps=1e-5, rms=True, has_weight=False)
    with pytest.raises(ember.errors.DTypeError, match="float dtype, got i32"):
        rowwise.softmax_rows(x.cast(ember.i32), log=False)
    with pytest.raises(ember.errors.ShapeError, match="weight of shape"):
        rowwise.norm_rows(x, w[:3], w, eps=1e-5, rms=False, has_weight=True, has_bias=True)
    assert backend.stats()["flushes"] == flushes + 1  # the first read ran the whole block


@needs_wgpu
def test_cross_entropy_is_routed_for_logit_rows_with_indices_without_smoothing(monkeypatch, rng):
    counts = {"ce": 0}
    op = rowwise.cross_entropy_rows

    def counted(*args):
        counts["ce"] += 1
        return op(*args)
    monkeypatch.setattr(rowwise, "cross_entropy_rows", counted)
    device = ember.Device.wgpu()
    x = ember.tensor(random(rng, (4, 7), "f32"), device=device)
    y = ember.tensor(np.array([0, 6, 2, 1]), device=device)
    cross_entropy(x, y)
    assert counts["ce"] == 1
    cross_entropy(x, y, label_smoothing=0.1)             # the composition
    cross_entropy(x, x.softmax(-1))                       # probabilities: the composition
    cross_entropy(x.reshape(4, 7, 1), y.reshape(4, 1))  # (N, C, d): the composition
    cross_entropy(x.to(ember.Device.cpu()), y.to(ember.Device.cpu()))  # the C target
    assert counts["ce"] == 1


def gpu_device(name: str) -> ember.Device:
    """Device.wgpu() or Device.cuda(0), or a skip naming why it is not here (scripts/gpu_check.sh runs this
    file on the GPU machine)."""
    if name == "wgpu":
        ok, why = wgpu_available()
        return ember.Device.wgpu() if ok else pytest.skip(f"no wgpu adapter: {why}")
    from ember.cube.runtime.cuda import cuda_available
    ok, why = cuda_available()
    return ember.Device.cuda(0) if ok else pytest.skip(f"no CUDA GPU here: {why}")


@pytest.mark.parametrize("gpu", ["wgpu", "cuda"])
@pytest.mark.parametrize("shape", [(5, 3), (4, 1000), (3, 2500), (1, 1)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_value_and_gradient_match_torch(rng, gpu, shape, reduction, weighted):
    base = gpu_device(gpu)
    n, c = shape
    x = random(rng, shape, "f32") * 4
    y = rng.integers(0, c, n)
    y[0] = -100 if n > 1 else y[0]  # an ignored row
    w = rng.uniform(0.5, 2.0, c).astype(np.float32) if weighted else None
    device = base.autodiff()
    xt = ember.tensor(x, device=device).require_grad()
    kwargs = dict(reduction=reduction, weight=None if w is None else ember.tensor(w, device=device))
    loss = cross_entropy(xt, ember.tensor(y, device=device), **kwargs)
    seed = random(rng, loss.shape, "f32") + 2
    grads = (loss * ember.tensor(seed, device=device)).sum().backward()
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    want = TF.cross_entropy(tx, torch.from_numpy(y), reduction=reduction,
                            weight=None if w is None else torch.tensor(w, dtype=torch.float64))
    (want * torch.from_numpy(np.asarray(seed)).double()).sum().backward()
    np.testing.assert_allclose(loss.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grads.get(xt).numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("device", ["cpu", "wgpu", "cuda", "numpy"])
def test_cross_entropy_rows_and_its_logsumexp_gradient_match_torch(rng, device):
    """The op itself on the C target, wgpu, CUDA and NumPy (its reference): both outputs, and the gradient
    of a loss that uses the logsumexp too; rows of -inf give PyTorch's -inf / NaN, a blocked target +inf."""
    base = gpu_device(device) if device in ("wgpu", "cuda") else getattr(ember.Device, device)()
    dev = base.autodiff()
    x = random(rng, (6, 300), "f32") * 5
    y = rng.integers(0, 300, 6).astype(np.int32)
    xt = ember.tensor(x, device=dev).require_grad()
    out = rowwise.cross_entropy_rows(xt, ember.tensor(y, device=dev))
    a, b = random(rng, 6, "f32"), random(rng, 6, "f32")
    grads = (out[:, 0] * ember.tensor(a, device=dev) + out[:, 1] * ember.tensor(b, device=dev)).sum().backward()
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    lse = torch.logsumexp(tx, -1)
    nll = lse - tx[torch.arange(6), torch.from_numpy(y).long()]
    (nll * torch.from_numpy(a).double() + lse * torch.from_numpy(b).double()).sum().backward()
    np.testing.assert_allclose(out.numpy(), torch.stack([nll, lse], -1).detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(grads.get(xt).numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-6)
    blocked = x.copy()
    blocked[1] = -np.inf
    blocked[2, y[2]] = -np.inf
    got = rowwise.cross_entropy_rows(ember.tensor(blocked, device=dev), ember.tensor(y, device=dev)).numpy()
    assert np.isnan(got[1, 0]) and got[1, 1] == -np.inf and got[2, 0] == np.inf and np.isfinite(got[[0, 3, 4, 5]]).all()
    empty = rowwise.cross_entropy_rows(ember.zeros(0, 4, device=dev), ember.zeros(0, dtype="i32", device=dev))
    assert empty.shape == (0, 2)


def test_cross_entropy_rows_is_recorded_and_checks_its_operands_at_the_call(rng):
    device = ember.Device.cpu()
    backend = ember.debug.fusion_backend(device)
    x = ember.tensor(rng.standard_normal((6, 40)).astype(np.float32), device=device)
    y = ember.tensor(np.arange(6, dtype=np.int32), device=device)
    flushes = backend.stats()["flushes"]
    out = rowwise.cross_entropy_rows(x * 2.0, y)
    assert backend.stats()["flushes"] == flushes and backend.stats()["pending"] >= 2
    with pytest.raises(ember.errors.ShapeError, match=r"logits \(R, C\) and one target per row \(R,\), got \(6, 40\) "
                                                      r"and \(5,\)"):
        rowwise.cross_entropy_rows(x, y[:5])
    with pytest.raises(ember.errors.ShapeError, match=r"at least one class, got logits of shape \(6, 0\)"):
        rowwise.cross_entropy_rows(x[:, :0], y)
    with pytest.raises(ember.errors.DTypeError, match="float logits and integer targets, got f32 and f32"):
        rowwise.cross_entropy_rows(x, y.cast(ember.f32))
    assert backend.stats()["flushes"] == flushes
    np.testing.assert_allclose(out.numpy(), rowwise._cross_entropy_reference(x.numpy() * 2, y.numpy()), rtol=1e-5)
