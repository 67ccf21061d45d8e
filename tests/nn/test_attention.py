"""Attention (ember/nn/attention.py) against PyTorch's F.scaled_dot_product_attention and
nn.MultiheadAttention(batch_first=True) with copied weights: outputs, input and parameter gradients,
masks of every kind, and the KV cache against full recomputation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import ember
from ember.nn.attention import KVCache, MultiHeadAttention, causal_mask, scaled_dot_product_attention
from nn.torch_twin import DEVICE, assert_close, check, mha_layout

E, H = 8, 2


def randn(rng, *shape):
    return rng.standard_normal(shape)


# ---- functional -------------------------------------------------------------------------------------

@pytest.mark.parametrize("mask_kind", ["none", "bool", "float", "causal", "causal+bool"])
def test_sdpa_matches_torch(mask_kind):
    rng = np.random.default_rng(1)
    q, k, v = randn(rng, 2, 3, 4, 5), randn(rng, 2, 3, 6, 5), randn(rng, 2, 3, 6, 7)
    mask = None
    if "bool" in mask_kind:
        mask = rng.random((4, 6)) > 0.3
        mask[:, 0] = True  # every query keeps one key, so no row is all -inf
    elif mask_kind == "float":
        mask = randn(rng, 3, 1, 6)
    causal = mask_kind.startswith("causal")
    e_in = [ember.tensor(x, device=DEVICE).require_grad() for x in (q, k, v)]
    t_in = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
    e_mask = None if mask is None else ember.tensor(mask, device=DEVICE)
    t_mask = None if mask is None else torch.tensor(mask)
    if causal and mask is not None:
        t_mask = t_mask & torch.ones(4, 6, dtype=torch.bool).tril()  # torch refuses mask + is_causal
    e_out = scaled_dot_product_attention(*e_in, attn_mask=e_mask, is_causal=causal, scale=0.3)
    t_out = TF.scaled_dot_product_attention(*t_in, attn_mask=t_mask, is_causal=causal and mask is None, scale=0.3)
    assert_close(e_out, t_out, 1e-9, 1e-10, "output")
    cot = randn(rng, *t_out.shape)
    grads = (e_out * ember.tensor(cot, device=DEVICE)).sum().backward()
    (t_out * torch.tensor(cot)).sum().backward()
    for e, t, name in zip(e_in, t_in, "qkv"):
        assert_close(e.grad(grads), t.grad, 1e-9, 1e-10, f"gradient of {name}")


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_fully_blocked_queries_get_zero_output_and_finite_gradients(kind):
    rng = np.random.default_rng(8)
    q, k, v = randn(rng, 1, 3, 4), randn(rng, 1, 5, 4), randn(rng, 1, 5, 2)
    allowed = rng.random((3, 5)) > 0.4
    allowed[0] = False  # query 0 may see nothing
    allowed[1:, 0] = True
    mask = allowed if kind == "bool" else np.where(allowed, 0.0, -np.inf)
    e_in = [ember.tensor(x, device=DEVICE).require_grad() for x in (q, k, v)]
    t_in = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
    e_out = scaled_dot_product_attention(*e_in, attn_mask=ember.tensor(mask))
    t_out = TF.scaled_dot_product_attention(*t_in, attn_mask=torch.tensor(mask))
    assert_close(e_out, t_out, 1e-9, 1e-10, "output")
    assert not e_out.numpy()[0, 0].any()
    grads = e_out.sum().backward()
    t_out.sum().backward()
    for e, t, name in zip(e_in, t_in, "qkv"):
        assert_close(e.grad(grads), t.grad, 1e-9, 1e-10, f"gradient of {name}")


def test_sdpa_dropout_zeroes_and_rescales_weights():
    rng = np.random.default_rng(2)
    q, k = ember.tensor(randn(rng, 1, 6, 4)), ember.tensor(randn(rng, 1, 8, 4))
    eye = ember.eye(8, dtype="f64").reshape(1, 8, 8)  # value = identity, so the output is the weights
    plain = scaled_dot_product_attention(q, k, eye).numpy()
    dropped = scaled_dot_product_attention(q, k, eye, dropout_p=0.5).numpy()
    kept = dropped != 0
    assert 0 < kept.sum() < kept.size
    np.testing.assert_allclose(dropped[kept], plain[kept] * 2.0, rtol=1e-12)


def test_causal_mask_offsets():
    assert causal_mask(2, 3).tolist() == [[False, True, True], [False, False, True]]
    assert causal_mask(2, 3, offset=1).tolist() == [[False, False, True], [False, False, False]]


def test_sdpa_rejects_bad_masks_and_shapes():
    q = ember.randn(1, 2, 4)
    with pytest.raises(ember.errors.DTypeError, match="bool or float"):
        scaled_dot_product_attention(q, q, q, attn_mask=ember.ones(2, 2, dtype="i64"))
    with pytest.raises(ember.ShapeError, match="differ in their last dim"):
        scaled_dot_product_attention(q, ember.randn(1, 2, 3), q)


# ---- MultiHeadAttention -----------------------------------------------------------------------------

def _mha_pair(bias: bool = True, kdim: int | None = None, vdim: int | None = None):
    torch.manual_seed(0)
    t = torch.nn.MultiheadAttention(E, H, bias=bias, batch_first=True, kdim=kdim, vdim=vdim)
    return MultiHeadAttention(E, H, bias=bias, kdim=kdim, vdim=vdim, dtype="f64"), t


def _torch_call(**kwargs):
    def call(m, q, k, v, *masks):
        out, w = m(q, k, v, need_weights=True, **dict(zip(("attn_mask", "key_padding_mask"), masks)), **kwargs)
        return out, w
    return call


def _ember_call(**kwargs):
    def call(m, q, k, v, *masks):
        out, w = m(q, k, v, need_weights=True, **dict(zip(("attn_mask", "key_padding_mask"), masks)), **kwargs)
        return out, w.mean(dim=1)  # torch averages the weights over heads
    return call


def test_mha_self_attention_matches_torch():
    rng = np.random.default_rng(3)
    e, t = _mha_pair()
    x = randn(rng, 2, 5, E)
    check(e, t, mha_layout(E), [x], lambda m, x: m(x), lambda m, x: m(x, x, x, need_weights=False),
          grad_inputs=[0])


def test_mha_cross_attention_with_kdim_vdim_matches_torch():
    rng = np.random.default_rng(4)
    e, t = _mha_pair(kdim=6, vdim=3)
    q, k, v = randn(rng, 2, 4, E), randn(rng, 2, 7, 6), randn(rng, 2, 7, 3)
    check(e, t, mha_layout(E, separate=True), [q, k, v], _ember_call(), _torch_call(), grad_inputs=[0, 1, 2])


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_mha_attn_mask_and_key_padding_mask_match_torch(kind):
    rng = np.random.default_rng(5)
    e, t = _mha_pair(bias=False)
    e.query.bias = e.key.bias = e.value.bias = e.output.bias = None  # ember's bias=False has none
    q, kv = randn(rng, 2, 4, E), randn(rng, 2, 6, E)
    blocked = rng.random((4, 6)) > 0.6
    padding = np.zeros((2, 6), bool)
    padding[0, 4:] = True
    blocked[:, 0] = False  # no row fully blocked
    if kind == "float":
        blocked = np.where(blocked, -np.inf, randn(rng, 4, 6))
        padding = np.where(padding, -np.inf, 0.0)
    layout = {k: v for k, v in mha_layout(E).items() if k.endswith("weight")}
    check(e, t, layout, [q, kv, kv, blocked, padding], _ember_call(), _torch_call(), grad_inputs=[0, 1])


def test_mha_per_head_mask_and_causal_match_torch():
    rng = np.random.default_rng(6)
    e, t = _mha_pair()
    x = randn(rng, 2, 5, E)
    per_head = rng.random((2 * H, 5, 5)) > 0.5
    per_head[..., 0] = False
    causal = np.triu(np.ones((5, 5), bool), 1)
    check(e, t, mha_layout(E), [x, per_head],
          lambda m, x, mask: m(x, attn_mask=mask, is_causal=True),
          lambda m, x, mask: m(x, x, x, attn_mask=torch.tensor(causal) | mask, need_weights=False)[0],
          grad_inputs=[0])


def test_kv_cache_matches_full_recomputation():
    rng = np.random.default_rng(7)
    mha = MultiHeadAttention(E, H, dtype="f64")
    x = ember.tensor(randn(rng, 2, 6, E))
    full = mha(x, is_causal=True).numpy()
    cache = KVCache()
    first = mha(x[:, :2], is_causal=True, cache=cache)  # a prompt of two tokens, then one at a time
    steps = [first] + [mha(x[:, t:t + 1], is_causal=True, cache=cache) for t in range(2, 6)]
    assert len(cache) == 6
    np.testing.assert_allclose(ember.cat(steps, dim=1).numpy(), full, rtol=1e-12, atol=1e-12)
    cache.clear()
    assert len(cache) == 0


def test_static_kv_cache_projects_the_memory_once():
    rng = np.random.default_rng(9)
    mha = MultiHeadAttention(E, H, dtype="f64")
    memory, other = ember.tensor(randn(rng, 1, 4, E)), ember.tensor(randn(rng, 1, 4, E))
    cache = KVCache(static=True)
    queries = [ember.tensor(randn(rng, 1, 1, E)) for _ in range(3)]
    # After the first call the cache answers for the memory, whatever key/value are passed.
    got = [mha(q, memory if i == 0 else other, cache=cache).numpy() for i, q in enumerate(queries)]
    expected = [mha(q, memory).numpy() for q in queries]
    np.testing.assert_allclose(np.concatenate(got), np.concatenate(expected), rtol=1e-12, atol=1e-12)
    assert len(cache) == 4


def test_mha_dropout_only_in_training():
    mha = MultiHeadAttention(E, H, dropout=0.5)
    x = ember.randn(1, 4, E)
    mha.eval()
    assert np.array_equal(mha(x).numpy(), mha(x).numpy())
    mha.train()
    assert not np.array_equal(mha(x).numpy(), mha(x).numpy())


def test_mha_rejects_bad_configuration_and_shapes():
    with pytest.raises(ember.ShapeError, match="not divisible"):
        MultiHeadAttention(10, 3)
    mha = MultiHeadAttention(E, H)
    with pytest.raises(ember.ShapeError, match="batch, length, features"):
        mha(ember.randn(4, E))
    with pytest.raises(ember.ShapeError, match="attn_mask of shape"):
        mha(ember.randn(1, 4, E), attn_mask=ember.ones(3, 3, dtype="bool"))
    with pytest.raises(ember.ShapeError, match="key_padding_mask of shape"):
        mha(ember.randn(1, 4, E), key_padding_mask=ember.ones(2, 4, dtype="bool"))
