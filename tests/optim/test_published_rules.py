"""Adan, Lion and Muon (PyTorch has no Adan or Lion; its Muon runs Newton-Schulz in bf16) against
direct NumPy implementations of their published update rules, over 50 steps of the MLP problem.

The references work in PyTorch's layout, (out, in) weights (ember's too), with gradients from
PyTorch's autograd, so they also check that Muon's lr adjustment reads the (out, in) shape.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ember.nn import ParamGroup
from ember.optim import AdamW, Adan, Lion, Muon

from .problem import assert_same, batch, ember_grads, make_pair, torch_backward


def run_against(opt_factory, rule, steps: int = 50) -> None:
    model, torch_model, named = make_pair()
    opt = opt_factory(model)
    states = {name: {} for name in named}
    for t in range(1, steps + 1):
        x, y = batch(seed=100 + t)
        opt.step(ember_grads(model, x, y))
        torch_model.zero_grad()
        torch_backward(torch_model, x, y)
        with torch.no_grad():
            for name, p in named.items():
                p.copy_(torch.from_numpy(rule(name, p.numpy().copy(), p.grad.numpy(), states[name], t)))
        assert_same(model, named, t)


def adan_rule(lr, betas=(0.98, 0.92, 0.99), eps=1e-8, wd=0.0, no_prox=False):
    """Xie et al. 2022, Algorithm 1 as in the official code (betas in its 'b' form, not 1 - b)."""
    b1, b2, b3 = betas

    def rule(name, p, g, s, t):
        prev = s.get("prev", g)
        d = g - prev
        s["m"] = b1 * s.get("m", 0) + (1 - b1) * g
        s["v"] = b2 * s.get("v", 0) + (1 - b2) * d
        s["n"] = b3 * s.get("n", 0) + (1 - b3) * (g + b2 * d) ** 2
        s["prev"] = g
        eta = lr / (np.sqrt(s["n"] / (1 - b3 ** t)) + eps)
        update = eta * (s["m"] / (1 - b1 ** t) + b2 * s["v"] / (1 - b2 ** t))
        if no_prox:
            return p * (1 - lr * wd) - update
        return (p - update) / (1 + lr * wd)

    return rule


def lion_rule(lr, betas=(0.9, 0.99), wd=0.0):
    """Chen et al. 2023, Program 1."""
    b1, b2 = betas

    def rule(name, p, g, s, t):
        m = s.get("m", np.zeros_like(g))
        p = p * (1 - lr * wd) - lr * np.sign(b1 * m + (1 - b1) * g)
        s["m"] = b2 * m + (1 - b2) * g
        return p

    return rule


def newton_schulz(g, steps=5, eps=1e-7, abc=(3.4445, -4.7750, 2.0315)):
    """Keller Jordan's `zeropower_via_newtonschulz5`, in f64."""
    a, b, c = abc
    x = g.T if g.shape[0] > g.shape[1] else g
    x = x / max(np.linalg.norm(x), eps)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if g.shape[0] > g.shape[1] else x


def muon_rule(lr, momentum=0.95, wd=0.1, nesterov=True, adam=(3e-4, (0.9, 0.95), 1e-10, 0.0)):
    """Muon on (out, in) matrices (torch.optim.Muon's algorithm); the reference's aux Adam elsewhere."""
    adam_lr, (b1, b2), adam_eps, adam_wd = adam

    def rule(name, p, g, s, t):
        if p.ndim == 2:
            s["buf"] = momentum * s.get("buf", 0) + (1 - momentum) * g
            u = (1 - momentum) * g + momentum * s["buf"] if nesterov else s["buf"]
            out_features, in_features = p.shape
            return p * (1 - lr * wd) - lr * math.sqrt(max(1, out_features / in_features)) * newton_schulz(u)
        s["m"] = b1 * s.get("m", 0) + (1 - b1) * g
        s["v"] = b2 * s.get("v", 0) + (1 - b2) * g * g
        update = (s["m"] / (1 - b1 ** t)) / (np.sqrt(s["v"] / (1 - b2 ** t)) + adam_eps)
        return p * (1 - adam_lr * adam_wd) - adam_lr * update

    return rule


@pytest.mark.parametrize("options", [{}, {"weight_decay": 0.05}, {"weight_decay": 0.05, "no_prox": True},
                                     {"betas": (0.9, 0.8, 0.95), "eps": 1e-6}], ids=str)
def test_adan(options):
    rule = adan_rule(0.01, options.get("betas", (0.98, 0.92, 0.99)), options.get("eps", 1e-8),
                     options.get("weight_decay", 0.0), options.get("no_prox", False))
    run_against(lambda m: Adan(m, lr=0.01, **options), rule)


@pytest.mark.parametrize("options", [{}, {"weight_decay": 0.5, "betas": (0.8, 0.95)}], ids=str)
def test_lion(options):
    rule = lion_rule(0.003, options.get("betas", (0.9, 0.99)), options.get("weight_decay", 0.0))
    run_against(lambda m: Lion(m, lr=0.003, **options), rule)


def test_muon_with_adamw_fallback_for_biases():
    run_against(lambda m: Muon(m, lr=0.02), muon_rule(0.02))


def test_muon_without_nesterov_and_own_fallback():
    run_against(lambda m: Muon(m, lr=0.02, nesterov=False, weight_decay=0.0,
                               fallback={"lr": 0.01, "betas": (0.8, 0.9), "weight_decay": 0.1}),
                muon_rule(0.02, nesterov=False, wd=0.0, adam=(0.01, (0.8, 0.9), 1e-10, 0.1)))


def test_muon_matrix_step_matches_torch_muon_up_to_bf16():
    """torch.optim.Muon orthogonalizes in bf16: one step agrees to bf16 precision, four bf16 ulps (2**-7
    each) of the orthogonalized update's unit entries scaled by the step's adjusted lr."""
    model, torch_model, named = make_pair()
    opt = Muon(model, lr=0.02, groups=[ParamGroup(regex="bias", optimizer=AdamW)])
    torch_opt = torch.optim.Muon([named["l1.weight"], named["l2.weight"]], lr=0.02)
    x, y = batch()
    opt.step(ember_grads(model, x, y))
    torch_backward(torch_model, x, y)
    torch_opt.step()
    assert_same_weights = [(model.l1.weight, named["l1.weight"]), (model.l2.weight, named["l2.weight"])]
    for ours, theirs in assert_same_weights:
        out_features, in_features = ours.shape
        step = 0.02 * math.sqrt(max(1, out_features / in_features))
        np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=0, atol=4 * 2**-7 * step)
