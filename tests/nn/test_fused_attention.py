"""The fused attention op (ember/nn/fused_attention.py, kernels in ember/kernels/attention.py): output
and gradients of q, k, v against torch's F.scaled_dot_product_attention, the logsumexp against
torch.logsumexp, finite differences, causal offsets with fully blocked rows against the composed path,
half precision, errors, and that scaled_dot_product_attention / MultiHeadAttention route to it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import ember
import ember.nn.attention as nn_attention
from ember.errors import DTypeError, ShapeError
from ember.extension import cube_target
from ember.nn.attention import MultiHeadAttention, attention_weights, causal_mask, scaled_dot_product_attention
from ember.nn.fused_attention import attention
from ops.torch_check import check_op, random
from tolerances import forward as forward_tolerance

# (batch dims, L, S, E, Ev): L != S, E != Ev, two batch dims; L past one cube of 16 rows and S past one
# block of 16 keys (L < S and L > S); an empty L.
SHAPES = [((2, 3), 5, 7, 8, 6), ((), 21, 18, 4, 4), ((2,), 18, 35, 4, 4), ((1,), 0, 4, 8, 6)]


def _inputs(rng, batch, n_q, n_k, e, ev, dtype):
    return [random(rng, batch + (n_q, e), dtype), random(rng, batch + (n_k, e), dtype),
            random(rng, batch + (n_k, ev), dtype)]


# Every shape in f32; f64 (accumulated in f64: tight tolerances) on the first two, which cover both kinds of
# cube (16 and 64 rows) and of key block (one, partial), so CI compiles fewer kernels.
CASES = [(shape, "f32") for shape in SHAPES] + [(shape, "f64") for shape in SHAPES[:2]]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape,dtype", CASES, ids=str)
def test_output_and_gradients_match_torch(device, rng, shape, causal, dtype):
    check_op(lambda q, k, v: attention(q, k, v, scale=0.7, causal=causal)[0],
             lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.7),
             _inputs(rng, *shape, dtype), device, grads=(0, 1, 2), rng=rng)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_logsumexp_matches_torch(device, rng, causal):
    q, k, v = _inputs(rng, (2,), 19, 17, 8, 3, "f32")
    out, lse = attention(*(ember.tensor(x, device=device) for x in (q, k, v)), causal=causal)
    scores = torch.from_numpy(q) @ torch.from_numpy(k).transpose(-1, -2) / np.sqrt(8)
    if causal:
        scores = scores.masked_fill(torch.ones(19, 17, dtype=torch.bool).triu(1), -torch.inf)
    assert lse.shape == (2, 19) and lse.dtype.name == "f32"
    np.testing.assert_allclose(lse.numpy(), torch.logsumexp(scores, -1).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_precision_accumulates_in_f32(device, rng, dtype):
    q, k, v = _inputs(rng, (3,), 20, 9, 8, 5, "f32")
    tdtype = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    halves = [torch.from_numpy(x).to(tdtype) for x in (q, k, v)]  # the operands both libraries see
    tracked = device.autodiff()
    e_in = [ember.tensor(h.float().numpy(), device=tracked).cast(getattr(ember, dtype)).require_grad()
            for h in halves]
    out, _ = attention(*e_in, causal=True)
    t_in = [h.float().requires_grad_(True) for h in halves]  # the f32 computation, rounded at the end
    want = TF.scaled_dot_product_attention(*t_in, is_causal=True)
    assert out.dtype.name == dtype
    rtol, atol = forward_tolerance(dtype)
    np.testing.assert_allclose(out.cast(ember.f32).numpy(), want.to(tdtype).float().detach().numpy(),
                               rtol=rtol, atol=atol)
    cot = random(rng, want.shape, "f32")
    grads = out.backward(ember.tensor(cot, device=device).cast(getattr(ember, dtype)))
    want.backward(torch.from_numpy(cot).to(tdtype).float())
    for e, t, name in zip(e_in, t_in, "qkv"):
        got = e.grad(grads)
        assert got.dtype.name == dtype, name
        np.testing.assert_allclose(got.cast(ember.f32).numpy(), t.grad.numpy(), rtol=4 * rtol, atol=4 * atol,
                                   err_msg=f"gradient of {name}")


def test_gradients_match_finite_differences_through_output_and_logsumexp(rng):
    q, k, v = _inputs(rng, (2,), 6, 5, 3, 2, "f64")
    cot_out, cot_lse = random(rng, (2, 6, 2)), random(rng, (2, 6))

    def loss(q, k, v, device=ember.Device.cpu()):
        ts = [x if isinstance(x, ember.Tensor) else ember.tensor(x, device=device) for x in (q, k, v)]
        out, lse = attention(*ts, causal=True, offset=1)
        return (out * ember.tensor(cot_out, device=device)).sum() + (lse * ember.tensor(cot_lse, device=device)).sum()

    tracked = ember.Device.cpu().autodiff()
    inputs = [ember.tensor(x, device=tracked).require_grad() for x in (q, k, v)]
    grads = loss(*inputs, device=tracked).backward()
    arrays, h = [q, k, v], 1e-6
    for i, name in enumerate("qkv"):
        numeric = np.zeros_like(arrays[i])
        for idx in np.ndindex(arrays[i].shape):
            up, down = [a.copy() for a in arrays], [a.copy() for a in arrays]
            up[i][idx] += h
            down[i][idx] -= h
            numeric[idx] = (loss(*up).item() - loss(*down).item()) / (2 * h)
        np.testing.assert_allclose(inputs[i].grad(grads).numpy(), numeric, rtol=1e-6, atol=1e-8,
                                   err_msg=f"gradient of {name}")


@pytest.mark.parametrize("offset", [3, -2], ids=["bottom-right", "rows-see-nothing"])
def test_causal_offset_matches_the_composed_path(device, rng, offset):
    # offset -2: queries 0 and 1 see no key: zero output, -inf logsumexp, zero gradients (as the composed path).
    q, k, v = _inputs(rng, (2,), 17, 20, 4, 3, "f32")
    results = []
    for fused in (True, False):
        tracked = device.autodiff()
        ts = [ember.tensor(x, device=tracked).require_grad() for x in (q, k, v)]
        if fused:
            out, lse = attention(*ts, causal=True, offset=offset)
            assert np.isneginf(lse.numpy()[:, :max(0, -offset)]).all()
        else:
            out = attention_weights(ts[0], ts[1], causal_mask(17, 20, offset, device)) @ ts[2]
        grads = (out * out).sum().backward()
        results.append([out.numpy()] + [t.grad(grads).numpy() for t in ts])
    for what, got, want in zip(["output", "dq", "dk", "dv"], *results):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=what)
    if offset < 0:
        assert not results[0][0][:, :-offset].any() and not results[0][1][:, :-offset].any()


def test_empty_keys_give_zero_output():
    q, k, v = ember.randn(2, 3, 4), ember.randn(2, 0, 4), ember.randn(2, 0, 5)
    out, lse = attention(q, k, v)
    assert out.shape == (2, 3, 5) and not out.numpy().any() and np.isneginf(lse.numpy()).all()


def test_bad_operands_raise_clear_errors():
    q = ember.randn(2, 3, 4)
    with pytest.raises(ShapeError, match="equal batch dims"):
        attention(q, ember.randn(3, 5, 4), ember.randn(3, 5, 4))
    with pytest.raises(ShapeError, match="equal batch dims"):
        attention(q, ember.randn(2, 5, 3), ember.randn(2, 5, 4))
    with pytest.raises(DTypeError, match="one float dtype"):
        attention(q, q.cast(ember.f64), q)
    with pytest.raises(DTypeError, match="one float dtype"):
        attention(*(ember.ones(2, 3, 4, dtype="i32"),) * 3)
    with pytest.raises(ShapeError, match="up to 256"):
        attention(ember.randn(1, 2, 300), ember.randn(1, 2, 300), ember.randn(1, 2, 3))
    with pytest.raises(ShapeError, match="at least 2 dims"):
        attention(ember.randn(4), ember.randn(4), ember.randn(4))


def test_the_ops_are_recorded_by_the_fusion_layer_and_check_their_operands_at_the_call(rng):
    """`pure=True`: on a fused device the forward and backward ops join the pending block (no flush at the
    call), so their rules check all the kernels would: a bad operand raises at the call."""
    from ember.nn.fused_attention import attention_grad_kv, attention_grad_q
    device = ember.Device.cpu()
    backend = ember.debug.fusion_backend(device)
    q, k, v = (ember.tensor(x, device=device) for x in _inputs(rng, (2,), 6, 5, 8, 4, "f32"))
    flushes = backend.stats()["flushes"]
    out, lse = attention(q, k, v, causal=True)
    packed = ember.cat([out, lse.unsqueeze(-1)], -1).reshape(2, 6, 5)
    grad = packed * 0.5
    dq = attention_grad_q(*(t.reshape(2, *t.shape[-2:]) for t in (q, k, v)), packed, grad, scale=0.3,
                          causal=True, offset=0)
    dkv = attention_grad_kv(*(t.reshape(2, *t.shape[-2:]) for t in (q, k, v)), packed, grad, scale=0.3,
                            causal=True, offset=0)
    assert backend.stats()["flushes"] == flushes and backend.stats()["pending"] >= 5
    assert dq.shape == (2, 6, 8) and dkv.shape == (2, 5, 12)
    np.testing.assert_allclose(out.numpy(), TF.scaled_dot_product_attention(
        *(torch.from_numpy(t.numpy()) for t in (q, k, v)), is_causal=True).numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ShapeError, match=r"must both be \(2, 6, 5\)"):
        attention_grad_q(q, k, v, packed[:, :5], grad[:, :5], scale=0.3, causal=True, offset=0)
    with pytest.raises(DTypeError, match="one float dtype, got f32, f32, f64"):
        attention_grad_kv(q, k, v, packed, grad.cast(ember.f64), scale=0.3, causal=True, offset=0)


def test_sdpa_and_multi_head_attention_route_to_the_fused_op(device, monkeypatch):
    # GPU targets take the fused op at any size; the C target from CPU_FUSED_MIN_SCORES score elements on
    # (below, BLAS makes the composed path faster); NumPy never (its reference builds the scores anyway).
    target = cube_target(device)
    calls = []

    def counted(*args, **kwargs):
        calls.append(kwargs)
        return attention(*args, **kwargs)

    monkeypatch.setattr(nn_attention, "attention", counted)
    q = ember.randn(2, 3, 5, 8, device=device)
    out = scaled_dot_product_attention(q, q, q, is_causal=True)
    gpu = target not in (None, "cpu")
    assert calls == ([dict(scale=None, causal=True)] if gpu else [])
    np.testing.assert_allclose(out.numpy(), attention(q, q, q, causal=True)[0].numpy(), rtol=1e-5, atol=1e-6)
    scaled_dot_product_attention(q, q, q, attn_mask=ember.ones(5, 5, dtype="bool", device=device))
    scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    assert len(calls) == gpu  # masks and dropout keep the composed path

    mha = MultiHeadAttention(8, 2, device=device)
    x = ember.randn(2, 5, 8, device=device)
    fused = mha(x, is_causal=True)
    assert calls[1:] == ([dict(causal=True, offset=0)] if gpu else [])
    composed, _ = mha(x, is_causal=True, need_weights=True)  # weights asked for: the composed path
    assert len(calls) == 2 * gpu
    np.testing.assert_allclose(fused.numpy(), composed.numpy(), rtol=1e-5, atol=1e-6)

    long = ember.zeros(1, 1, 4096, 8, device=device)  # 2**24 scores: the C target's threshold
    assert nn_attention.fusable(long, long, long) == (target is not None)
    assert nn_attention.fusable(long[..., :4095, :], long, long) == gpu
    wide = ember.zeros(1, 2, 128, device=device)  # 16.5 KiB of shared memory: past WebGPU's guaranteed 16
    assert nn_attention.fusable(wide, wide, wide) == (gpu and target != "wgsl")


def test_forward_and_backward_stay_on_the_device(device):
    # Device backends run ops without a device row (slice_assign among them) on the host: the fused op and
    # its gradient must not (on the H200 such a round trip cost more than the kernels).
    backend = device.inner.backend
    while backend is not None and not hasattr(backend, "fallbacks"):
        backend = getattr(backend, "inner", None)
    if backend is None:
        pytest.skip(f"{device!r} has no cube backend (the NumPy references run there by design)")
    before = set(backend.fallbacks)
    tracked = device.autodiff()
    ts = [ember.randn(2, 3, 20, 8, device=tracked).require_grad() for _ in range(3)]
    out, _ = attention(*ts, causal=True)
    grads = (out * out).sum().backward()
    for t in ts:
        t.grad(grads).numpy()
    assert set(backend.fallbacks) == before, f"ran on the host: {sorted(set(backend.fallbacks) - before)}"


@pytest.mark.parametrize("causal,offset", [(False, 0), (True, 0), (True, 3)], ids=["full", "causal", "offset"])
def test_materialized_backward_matches_the_kernels(device, rng, monkeypatch, causal, offset):
    # The L x S matmul backward (the GPU's default) against the flash kernels' on the same inputs; the
    # gradient reaches the logsumexp too.
    import ember.nn.fused_attention as ops
    q, k, v = _inputs(rng, (2,), 21, 18, 8, 6, "f32")
    results = []
    for kinds in (ops.MATERIALIZE_KINDS + (device.kind,), ()):
        monkeypatch.setattr(ops, "MATERIALIZE_KINDS", kinds)
        monkeypatch.setattr(ops, "MATERIALIZE_MIN_SCORES", 0)
        tracked = device.autodiff()
        ts = [ember.tensor(x, device=tracked).require_grad() for x in (q, k, v)]
        out, lse = attention(*ts, scale=0.6, causal=causal, offset=offset)
        grads = ((out * out).sum() + lse.sum() * 0.3).backward()
        results.append([t.grad(grads).numpy() for t in ts])
    for what, got, want in zip(["dq", "dk", "dv"], *results):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=what)


@pytest.mark.parametrize("causal,offset", [(False, 0), (True, 0), (True, 3)], ids=["full", "causal", "offset"])
def test_forward_through_the_scores_matches_the_kernel(device, rng, monkeypatch, causal, offset):
    # The forward through the (BH, L, S) scores (two batched matmuls and a row kernel: CUDA's default for
    # long sequences) against the flash kernel on the same inputs, output and logsumexp; it runs on device
    # arrays (GPU targets), and its gradients are the backward's own.
    import ember.nn.fused_attention as ops
    target = cube_target(device)
    if target in (None, "cpu"):
        pytest.skip(f"{device!r}: the forward through the scores runs on device arrays (GPU targets)")
    q, k, v = _inputs(rng, (2,), 21, 300, 8, 6, "f32")
    results = []
    for kinds in ((target,), ()):
        monkeypatch.setattr(ops, "MATERIALIZE_KINDS", kinds)
        monkeypatch.setattr(ops, "MATERIALIZE_MIN_SCORES", 0)
        out, lse = attention(*(ember.tensor(x, device=device) for x in (q, k, v)), scale=0.6, causal=causal,
                             offset=offset)
        results.append((out.numpy(), lse.numpy()))
    (out, lse), (want_out, want_lse) = results
    np.testing.assert_allclose(out, want_out, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)
