"""Clipping by value and by global norm against torch.nn.utils, as functions and as optimizer options,
and gradient accumulation against PyTorch's summed `.grad`."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ember.nn import ParamGroup
from ember.optim import SGD, Adam, GradientAccumulator, clip_grad_norm, clip_grad_value

from .problem import assert_same, batch, compare_with_torch, ember_grads, make_pair, torch_backward


@pytest.mark.parametrize("max_norm, norm_type", [(0.3, 2.0), (100.0, 2.0), (0.2, 1.0), (0.05, math.inf)])
def test_clip_grad_norm_matches_torch(max_norm, norm_type):
    model, torch_model, named = make_pair()
    x, y = batch()
    grads = ember_grads(model, x, y)
    torch_backward(torch_model, x, y)
    total = clip_grad_norm(grads, max_norm, model, norm_type=norm_type)
    torch_total = torch.nn.utils.clip_grad_norm_(torch_model.parameters(), max_norm, norm_type=norm_type)
    assert total == pytest.approx(torch_total.item(), rel=1e-12)
    for name, p in model.named_parameters():
        np.testing.assert_allclose(p.grad(grads).numpy(), named[name].grad.numpy(), rtol=1e-12)


def test_clip_grad_value_matches_torch():
    model, torch_model, named = make_pair()
    x, y = batch()
    grads = ember_grads(model, x, y)
    torch_backward(torch_model, x, y)
    clip_grad_value(grads, 0.05, model)
    torch.nn.utils.clip_grad_value_(torch_model.parameters(), 0.05)
    for name, p in model.named_parameters():
        np.testing.assert_allclose(p.grad(grads).numpy(), named[name].grad.numpy(), rtol=1e-12)
        assert np.abs(p.grad(grads).numpy()).max() <= 0.05


def test_clip_functions_reject_bad_arguments():
    model = make_pair()[0]
    grads = ember_grads(model, *batch())
    with pytest.raises(ValueError, match="max_norm must be a positive number"):
        clip_grad_norm(grads, 0.0, model)
    with pytest.raises(TypeError, match="Gradients"):
        clip_grad_value({}, 1.0, model)


class _ClippedTorch:
    """A torch optimizer that clips before each step, as `clip_value=` / `clip_norm=` do."""

    def __init__(self, opt, params, clip_value=None, clip_norm=None):
        self.opt, self.params, self.clip_value, self.clip_norm = opt, params, clip_value, clip_norm

    def zero_grad(self):
        self.opt.zero_grad()

    def step(self):
        if self.clip_value is not None:
            torch.nn.utils.clip_grad_value_(self.params, self.clip_value)
        if self.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.params, self.clip_norm)
        self.opt.step()


@pytest.mark.parametrize("clip", [{"clip_norm": 0.2}, {"clip_value": 0.03}, {"clip_value": 0.05, "clip_norm": 0.1}],
                         ids=str)
def test_clipping_options_match_torch_over_a_run(clip):
    def make_torch(named):
        params = list(named.values())
        return _ClippedTorch(torch.optim.SGD(params, lr=0.1, momentum=0.9), params, **clip)

    compare_with_torch(lambda m: SGD(m, lr=0.1, momentum=0.9, **clip), make_torch, steps=30)


def test_clip_norm_is_global_over_delegated_groups():
    """The norm covers every parameter of the step, the SGD-delegated ones included."""
    def make_torch(named):
        params = list(named.values())
        first, second = [named["l1.weight"], named["l1.bias"]], [named["l2.weight"], named["l2.bias"]]

        class Two:
            def zero_grad(self):
                adam.zero_grad(), sgd.zero_grad()

            def step(self):
                torch.nn.utils.clip_grad_norm_(params, 0.1)
                adam.step(), sgd.step()

        adam, sgd = torch.optim.Adam(first, lr=0.01), torch.optim.SGD(second, lr=0.05)
        return Two()

    compare_with_torch(lambda m: Adam(m, lr=0.01, clip_norm=0.1,
                                      groups=[ParamGroup(prefix="l2.", optimizer=SGD, lr=0.05)]),
                       make_torch, steps=20)


def test_accumulated_gradients_match_torch_summed_grad():
    model, torch_model, named = make_pair()
    opt = Adam(model, lr=0.01)
    torch_opt = torch.optim.Adam(named.values(), lr=0.01)
    acc = GradientAccumulator()
    for step in range(8):
        torch_opt.zero_grad()
        for micro in range(3):
            x, y = batch(seed=10 * step + micro, n=6)
            acc.accumulate(model, ember_grads(model, x, y))
            torch_backward(torch_model, x, y)
        assert acc.passes == 3
        opt.step(acc.grads())
        torch_opt.step()
        assert acc.passes == 0
        assert_same(model, named, step)


def test_accumulator_refuses_a_model_changed_between_passes():
    model = make_pair()[0]
    acc = GradientAccumulator()
    acc.accumulate(model, ember_grads(model, *batch()))
    SGD(model, lr=0.1).step(ember_grads(model, *batch()))
    with pytest.raises(RuntimeError, match="changed between passes"):
        acc.accumulate(model, ember_grads(model, *batch()))
