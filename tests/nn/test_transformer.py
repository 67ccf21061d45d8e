"""Transformer blocks (ember/nn/transformer.py) against torch.nn.TransformerEncoderLayer/DecoderLayer and
their stacks (batch_first, dropout 0) with copied weights, post-norm and pre-norm, relu and gelu:
outputs and gradients of inputs and parameters; incremental decoding against full recomputation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
from ember.nn.transformer import (PositionWiseFeedForward, TransformerDecoder, TransformerDecoderLayer,
                                  TransformerEncoder, TransformerEncoderLayer)
from nn.torch_twin import check, mha_layout

D, H, FF = 8, 2, 12


def prefixed(prefix: str, layout: dict) -> dict:
    """A layout of a sub-module, both names (ember and torch) under `prefix`."""
    return {prefix + k: (lambda t, fn=fn: fn({n[len(prefix):]: v for n, v in t.items() if n.startswith(prefix)}))
            for k, fn in layout.items()}


def linear(name: str) -> dict:
    return {"weight": lambda t: t[f"{name}.weight"], "bias": lambda t: t[f"{name}.bias"]}


def norm(name: str) -> dict:
    return {"weight": lambda t: t[f"{name}.weight"], "bias": lambda t: t[f"{name}.bias"]}


def sub(prefix: str, layout: dict) -> dict:
    return {f"{prefix}.{k}": v for k, v in layout.items()}


def attention(torch_name: str) -> dict:
    """MultiHeadAttention weights from a torch MultiheadAttention called `torch_name`."""
    return {k: (lambda t, fn=fn: fn({n[len(torch_name) + 1:]: v for n, v in t.items()
                                     if n.startswith(torch_name + ".")}))
            for k, fn in mha_layout(D).items()}


def encoder_layer_layout() -> dict:
    return {**sub("self_attn", attention("self_attn")), **sub("ff.linear_inner", linear("linear1")),
            **sub("ff.linear_outer", linear("linear2")), **sub("norm1", norm("norm1")),
            **sub("norm2", norm("norm2"))}


def decoder_layer_layout() -> dict:
    return {**encoder_layer_layout(), **sub("cross_attn", attention("multihead_attn")),
            **sub("norm3", norm("norm3"))}


def stack_layout(layer_layout: dict, num_layers: int, final_norm: bool) -> dict:
    out = {}
    for i in range(num_layers):
        out.update(prefixed(f"layers.{i}.", layer_layout))
    if final_norm:
        out.update(sub("norm", norm("norm")))
    return out


def test_feed_forward_matches_torch_sequential():
    torch.manual_seed(0)
    t = torch.nn.Sequential(torch.nn.Linear(D, FF), torch.nn.GELU(), torch.nn.Linear(FF, D))
    e = PositionWiseFeedForward(D, FF, activation="gelu", dtype="f64")
    layout = {**sub("linear_inner", linear("0")), **sub("linear_outer", linear("2"))}
    x = np.random.default_rng(0).standard_normal((2, 3, D))
    check(e, t, layout, [x], lambda m, x: m(x), lambda m, x: m(x), grad_inputs=[0])


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_matches_torch(norm_first, activation):
    torch.manual_seed(1)
    t = torch.nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, activation=activation, batch_first=True,
                                         norm_first=norm_first)
    e = TransformerEncoderLayer(D, H, FF, dropout=0.0, activation=activation, norm_first=norm_first, dtype="f64")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 5, D))
    padding = np.zeros((2, 5), bool)
    padding[1, 3:] = True
    check(e, t, encoder_layer_layout(), [x, padding],
          lambda m, x, p: m(x, src_key_padding_mask=p), lambda m, x, p: m(x, src_key_padding_mask=p),
          grad_inputs=[0])


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(norm_first):
    torch.manual_seed(3)
    t = torch.nn.TransformerDecoderLayer(D, H, FF, dropout=0.0, activation="gelu", batch_first=True,
                                         norm_first=norm_first)
    e = TransformerDecoderLayer(D, H, FF, dropout=0.0, activation="gelu", norm_first=norm_first, dtype="f64")
    rng = np.random.default_rng(4)
    x, memory = rng.standard_normal((2, 4, D)), rng.standard_normal((2, 6, D))
    causal = np.triu(np.ones((4, 4), bool), 1)
    check(e, t, decoder_layer_layout(), [x, memory],
          lambda m, x, mem: m(x, mem, tgt_is_causal=True),
          lambda m, x, mem: m(x, mem, tgt_mask=torch.tensor(causal)), grad_inputs=[0, 1])


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_stack_matches_torch(norm_first):
    torch.manual_seed(5)
    layer = torch.nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first)
    t = torch.nn.TransformerEncoder(layer, 2, norm=torch.nn.LayerNorm(D) if norm_first else None,
                                    enable_nested_tensor=False)
    for p in t.parameters():  # the stack clones one layer: make the two differ
        torch.nn.init.normal_(p, std=0.3)
    e = TransformerEncoder(D, H, FF, num_layers=2, dropout=0.0, norm_first=norm_first, final_norm=norm_first,
                           dtype="f64")
    x = np.random.default_rng(6).standard_normal((2, 5, D))
    check(e, t, stack_layout(encoder_layer_layout(), 2, norm_first), [x], lambda m, x: m(x), lambda m, x: m(x),
          grad_inputs=[0])


def test_decoder_stack_matches_torch():
    torch.manual_seed(7)
    layer = torch.nn.TransformerDecoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=True)
    t = torch.nn.TransformerDecoder(layer, 2, norm=torch.nn.LayerNorm(D))
    for p in t.parameters():
        torch.nn.init.normal_(p, std=0.3)
    e = TransformerDecoder(D, H, FF, num_layers=2, dropout=0.0, norm_first=True, final_norm=True, dtype="f64")
    rng = np.random.default_rng(8)
    x, memory = rng.standard_normal((2, 4, D)), rng.standard_normal((2, 3, D))
    padding = np.array([[False, False, True], [False, False, False]])
    check(e, t, stack_layout(decoder_layer_layout(), 2, True), [x, memory, padding],
          lambda m, x, mem, p: m(x, mem, memory_key_padding_mask=p),
          lambda m, x, mem, p: m(x, mem, memory_key_padding_mask=p), grad_inputs=[0, 1])


@pytest.mark.parametrize("norm_first", [False, True])
def test_incremental_decoding_matches_full_recomputation(norm_first):
    dec = TransformerDecoder(D, H, FF, num_layers=2, dropout=0.0, norm_first=norm_first, dtype="f64")
    rng = np.random.default_rng(9)
    x, memory = ember.tensor(rng.standard_normal((2, 5, D))), ember.tensor(rng.standard_normal((2, 3, D)))
    full = dec(x, memory, tgt_is_causal=True).numpy()
    cache = dec.new_cache()
    steps = [dec(x[:, t:t + 1], memory, tgt_is_causal=True, cache=cache) for t in range(5)]
    np.testing.assert_allclose(ember.cat(steps, dim=1).numpy(), full, rtol=1e-11, atol=1e-12)
    assert [(len(c.self_attn), len(c.cross_attn)) for c in cache] == [(5, 3), (5, 3)]  # memory projected once
    with pytest.raises(ember.ShapeError, match="new_cache"):
        dec(x, memory, cache=cache[:1])


def test_dropout_only_in_training():
    enc = TransformerEncoder(D, H, FF, num_layers=1, dropout=0.3)
    x = ember.randn(2, 4, D)
    enc.eval()
    assert np.array_equal(enc(x).numpy(), enc(x).numpy())
    enc.train()
    assert not np.array_equal(enc(x).numpy(), enc(x).numpy())


def test_rejects_unknown_activation():
    with pytest.raises(ValueError, match="unknown activation 'swishy'"):
        PositionWiseFeedForward(D, FF, activation="swishy")
