"""Param groups naming another optimizer, the base lr under a scheduler, frozen and gradient-less
parameters, and the errors bad options raise."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
from ember.nn import Param, ParamGroup
from ember.optim import SGD, AdaGrad, Adam, AdamW, Adan, Lion, Muon, RMSprop

from .problem import MLP, assert_same, batch, compare_with_torch, ember_grads, make_pair, torch_backward


def test_group_with_another_optimizer_is_delegated():
    """l2 is trained by SGD with momentum, the rest by AdamW: as two torch optimizers side by side."""
    class Both:
        def __init__(self, named):
            self.parts = [torch.optim.AdamW([named["l1.weight"], named["l1.bias"]], lr=0.01, weight_decay=0.1),
                          torch.optim.SGD([named["l2.weight"], named["l2.bias"]], lr=0.1, momentum=0.9)]

        def zero_grad(self):
            for part in self.parts:
                part.zero_grad()

        def step(self):
            for part in self.parts:
                part.step()

    def make(model):
        opt = AdamW(model, lr=0.01, weight_decay=0.1,
                    groups=[ParamGroup(prefix="l2.", optimizer=SGD, lr=0.1, momentum=0.9)])
        assert repr(opt) == "AdamW(lr=0.01, params=2, SGD: 2 params)"
        return opt

    compare_with_torch(make, Both)


def test_setting_lr_scales_every_group_and_delegate_by_the_same_factor():
    model, torch_model, named = make_pair()
    opt = Adam(model, lr=0.01, groups=[ParamGroup(prefix="l1.w", lr=0.03),
                                       ParamGroup(prefix="l2.", optimizer=SGD, lr=0.1)])
    torch_opts = [torch.optim.Adam([{"params": [named["l1.weight"]], "lr": 0.03},
                                    {"params": [named["l1.bias"]]}], lr=0.01),
                  torch.optim.SGD([named["l2.weight"], named["l2.bias"]], lr=0.1)]
    for step in range(12):
        factor = 0.5 ** (step // 4)  # a step schedule: every group's lr is its initial lr times `factor`
        opt.lr = 0.01 * factor
        for torch_opt, initial in zip(torch_opts, ([0.03, 0.01], [0.1])):
            for group, lr in zip(torch_opt.param_groups, initial):
                group["lr"] = lr * factor
        x, y = batch(seed=step)
        opt.step(ember_grads(model, x, y))
        for torch_opt in torch_opts:
            torch_opt.zero_grad()
        torch_backward(torch_model, x, y)
        for torch_opt in torch_opts:
            torch_opt.step()
        assert_same(model, named, step)
    assert opt.lr == pytest.approx(0.01 * 0.25)


def test_frozen_params_are_not_updated_and_the_rest_match_torch():
    def make(model):
        model.freeze(ParamGroup(prefix="l1."))
        return Adam(model, lr=0.01)

    def make_torch(named):
        named["l1.weight"].requires_grad_(False)
        named["l1.bias"].requires_grad_(False)
        return torch.optim.Adam([named["l2.weight"], named["l2.bias"]], lr=0.01)

    trained = compare_with_torch(make, make_torch)
    assert np.array_equal(trained.l1.weight.numpy(), make_pair()[0].l1.weight.numpy())


def test_a_param_without_gradient_is_skipped_and_keeps_no_state():
    model = MLP()
    model.unused = Param(ember.ones(3, dtype=ember.f64, device=model.l1.weight.device))
    opt = Adam(model, lr=0.1)
    opt.step(ember_grads(model, *batch()))
    assert model.unused.numpy().tolist() == [1.0, 1.0, 1.0]
    assert "unused" not in opt.state_dict()["params"] and "l1.weight" in opt.state_dict()["params"]


def test_select_trains_only_the_chosen_params():
    model = MLP()
    before = model.l2.weight.numpy().copy()
    opt = SGD(model, lr=0.1, select=ParamGroup(prefix="l1."))
    opt.step(ember_grads(model, *batch()))
    assert np.array_equal(model.l2.weight.numpy(), before)
    assert sorted(opt.state_dict()["params"]) == ["l1.bias", "l1.weight"]


def test_muon_sends_a_claimed_2d_param_to_the_group_optimizer():
    model = MLP()
    opt = Muon(model, lr=0.02, groups=[ParamGroup(prefix="l2.", optimizer=Lion, lr=1e-3)])
    assert repr(opt) == "Muon(lr=0.02, params=1, AdamW: 1 params, Lion: 2 params)"


@pytest.mark.parametrize("make, message", [
    (lambda m: Adam(m, lr=0.1, beta=0.9), "unknown option"),
    (lambda m: Adam(m, lr=0.1, betas=(0.9, 1.0)), "betas must be 2 numbers in"),
    (lambda m: Adam(m, lr=-1), "lr must be >= 0"),
    (lambda m: Adam(m, lr="0.1"), "lr must be a number"),
    (lambda m: SGD(m, lr=0.1, nesterov=True), "nesterov needs momentum > 0"),
    (lambda m: SGD(m, lr=0.1, groups=[ParamGroup(prefix="l1.", momentum=-1)]), "momentum must be >= 0"),
    (lambda m: SGD(m, lr=0.1, groups=[ParamGroup(prefix="l1.", clip_norm=1.0)]), "clipping is set on the optimizer"),
    (lambda m: SGD(m, lr=0.1, groups=[ParamGroup(prefix="l1.", optimizer=torch.optim.SGD)]), "must be an Optimizer class"),
    (lambda m: SGD(m, lr=0, groups=[ParamGroup(prefix="l1.", lr=0.1)]), "needs a nonzero base lr"),
    (lambda m: SGD(m, lr=0.1, clip_norm=0), "clip_norm must be > 0"),
    (lambda m: Muon(m, ns_steps=0), "ns_steps must be an int"),
    (lambda m: Adam(m, lr=0.1, groups=[ParamGroup(prefix="l2.", optimizer=SGD, betas=(0.9, 0.9))]),
     r"Adam group ParamGroup\(prefix='l2.'.*SGD: unknown option\(s\) \['betas'\]"),
    (lambda m: Adam(m, lr=0.1, groups=[ParamGroup(prefix="layer2.", lr=1.0)]), "get no parameter .* l1.weight"),
    (lambda m: Adam(m, lr=0.1, groups=[ParamGroup(prefix="l2."), ParamGroup(prefix="l2.w")]), "get no parameter"),
    (lambda m: SGD(object(), lr=0.1), "takes a Module"),
])
def test_bad_options_raise_naming_the_problem(make, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make(MLP())


def test_step_needs_gradients_and_an_autodiff_model():
    model = MLP()
    opt = SGD(model, lr=0.1)
    with pytest.raises(TypeError, match="takes the Gradients"):
        opt.step({})
    grads = ember_grads(model, *batch())
    model.to(ember.Device.cpu())
    with pytest.raises(ValueError, match="not tracked by autodiff"):
        opt.step(grads)


def test_stale_gradients_from_before_the_last_step_raise():
    model = MLP()
    opt = SGD(model, lr=0.1)
    grads = ember_grads(model, *batch())
    opt.step(grads)
    with pytest.raises(ValueError, match="no trainable parameter has a gradient"):
        opt.step(grads)


@pytest.mark.parametrize("cls", [SGD, Adam, AdamW, AdaGrad, RMSprop, Adan, Lion, Muon])
def test_f32_params_stay_f32_on_their_device(cls):
    model = MLP()
    model.l1.weight.set(model.l1.weight.cast(ember.f32))
    opt = cls(model, lr=0.01)
    for _ in range(2):
        opt.step(ember_grads(model, *batch()))
    assert model.l1.weight.dtype == ember.f32 and model.l2.weight.dtype == ember.f64
    assert model.l1.weight.device == model.l1.weight.device.inner.autodiff() and model.l1.weight.requires_grad
