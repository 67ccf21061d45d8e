"""Recurrent layers (ember/nn/rnn.py) against torch.nn.RNN/LSTM/GRU with copied weights: outputs, final
states, and gradients of the input, the initial states and every weight."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ember
from ember.nn.rnn import GRU, LSTM, RNN
from nn.torch_twin import check

CLASSES = {"rnn_tanh": (RNN, torch.nn.RNN, {}), "rnn_relu": (RNN, torch.nn.RNN, {"nonlinearity": "relu"}),
           "lstm": (LSTM, torch.nn.LSTM, {}), "gru": (GRU, torch.nn.GRU, {})}


def layout(num_layers: int, bidirectional: bool, bias: bool = True) -> dict:
    """ember names (layers.{layer}.{direction}.weight_ih) -> torch's (weight_ih_l{layer}[_reverse]), same layout."""
    out = {}
    for layer in range(num_layers):
        for direction in range(2 if bidirectional else 1):
            suffix = f"l{layer}" + ("_reverse" if direction else "")
            for name in ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if bias else ()):
                key = f"{name}_{suffix}"
                out[f"layers.{layer}.{direction}.{name}"] = lambda t, key=key: t[key]
    return out


@pytest.mark.parametrize("kind", list(CLASSES))
@pytest.mark.parametrize("num_layers,bidirectional,batch_first", [(1, False, False), (2, True, True)])
def test_matches_torch_with_initial_states(kind, num_layers, bidirectional, batch_first):
    ours, theirs, extra = CLASSES[kind]
    rng = np.random.default_rng(len(kind) + num_layers)
    torch.manual_seed(0)
    t = theirs(3, 4, num_layers=num_layers, bidirectional=bidirectional, batch_first=batch_first, **extra)
    e = ours(3, 4, num_layers=num_layers, bidirectional=bidirectional, batch_first=batch_first, dtype="f64",
             **extra)
    x = rng.standard_normal((2, 5, 3) if batch_first else (5, 2, 3))
    states = [rng.standard_normal((num_layers * (2 if bidirectional else 1), 2, 4)) for _ in
              range(2 if kind == "lstm" else 1)]
    if kind == "lstm":
        call = lambda m, x, h, c: m(x, (h, c))  # noqa: E731
    else:
        call = lambda m, x, h: m(x, h)  # noqa: E731
    check(e, t, layout(num_layers, bidirectional), [x, *states], call, call,
          grad_inputs=list(range(1 + len(states))))


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_unbatched_without_bias_and_zero_state_matches_torch(kind):
    ours, theirs, _ = CLASSES[kind]
    torch.manual_seed(1)
    t = theirs(3, 4, bias=False)
    e = ours(3, 4, bias=False, dtype="f64")
    x = np.random.default_rng(2).standard_normal((6, 3))
    check(e, t, layout(1, False, bias=False), [x], lambda m, x: m(x), lambda m, x: m(x), grad_inputs=[0])


def test_init_is_uniform_within_one_over_sqrt_hidden():
    lstm = LSTM(10, 25, num_layers=2, bidirectional=True)
    bound = 1 / math.sqrt(25)
    values = np.concatenate([p.numpy().ravel() for p in lstm.parameters()])
    assert np.abs(values).max() <= bound and np.abs(values).max() > 0.9 * bound
    assert abs(values.mean()) < 0.01
    assert lstm.layers[1][0].weight_ih.shape == (100, 50)  # the second layer reads both directions


def test_dropout_between_layers_only_in_training():
    gru = GRU(3, 8, num_layers=2, dropout=0.5)
    x = ember.randn(4, 2, 3)
    gru.eval()
    assert np.array_equal(gru(x)[0].numpy(), gru(x)[0].numpy())
    gru.train()
    assert not np.array_equal(gru(x)[0].numpy(), gru(x)[0].numpy())
    single = GRU(3, 8, num_layers=1, dropout=0.5)  # nothing between layers: dropout has no effect
    assert np.array_equal(single(x)[0].numpy(), single(x)[0].numpy())


def test_rejects_bad_input_and_states():
    lstm = LSTM(3, 4, num_layers=2)
    with pytest.raises(ember.ShapeError, match="input must be"):
        lstm(ember.randn(5, 2, 7))
    with pytest.raises(ember.ShapeError, match="initial state of shape"):
        lstm(ember.randn(5, 2, 3), (ember.zeros(1, 2, 4), ember.zeros(1, 2, 4)))
    with pytest.raises(ember.ShapeError, match=r"initial state of shape \(2, 1, 4\); expected \(2, 4\)"):
        lstm(ember.randn(5, 3), (ember.zeros(2, 1, 4), ember.zeros(2, 1, 4)))
    with pytest.raises(TypeError, match=r"\(h, c\)"):
        lstm(ember.randn(5, 2, 3), ember.zeros(2, 2, 4))
    with pytest.raises(ValueError, match="nonlinearity"):
        RNN(3, 4, nonlinearity="sigmoid")
