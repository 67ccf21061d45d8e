"""Every optimizer PyTorch also has, against `torch.optim` over 50 steps of the MLP problem (f64)."""

from __future__ import annotations

import pytest
import torch

from ember.optim import SGD, AdaGrad, Adam, AdamW, ParamGroup, RMSprop

from .problem import compare_with_torch

# (ember class, torch class, lr, options) — options use the same names in both libraries.
CASES = [
    (SGD, torch.optim.SGD, 0.05, {}),
    (SGD, torch.optim.SGD, 0.05, {"momentum": 0.9}),
    (SGD, torch.optim.SGD, 0.05, {"momentum": 0.9, "dampening": 0.3, "weight_decay": 0.01}),
    (SGD, torch.optim.SGD, 0.05, {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    (Adam, torch.optim.Adam, 0.01, {}),
    (Adam, torch.optim.Adam, 0.01, {"betas": (0.8, 0.99), "weight_decay": 0.05, "eps": 1e-6}),
    (Adam, torch.optim.Adam, 0.01, {"amsgrad": True, "weight_decay": 0.01}),
    (AdamW, torch.optim.AdamW, 0.01, {}),
    (AdamW, torch.optim.AdamW, 0.01, {"weight_decay": 0.1, "amsgrad": True}),
    (AdaGrad, torch.optim.Adagrad, 0.05, {}),
    (AdaGrad, torch.optim.Adagrad, 0.05, {"lr_decay": 0.01, "weight_decay": 0.01,
                                          "initial_accumulator_value": 0.1, "eps": 1e-8}),
    (RMSprop, torch.optim.RMSprop, 0.005, {}),
    (RMSprop, torch.optim.RMSprop, 0.005, {"centered": True, "weight_decay": 0.01}),
    (RMSprop, torch.optim.RMSprop, 0.002, {"momentum": 0.9, "alpha": 0.9}),
    (RMSprop, torch.optim.RMSprop, 0.002, {"momentum": 0.5, "centered": True}),
]


@pytest.mark.parametrize("cls, torch_cls, lr, options", CASES,
                         ids=[f"{c[0].__name__}-{'-'.join(map(str, c[3])) or 'plain'}" for c in CASES])
def test_trajectory_matches_torch(cls, torch_cls, lr, options):
    compare_with_torch(lambda model: cls(model, lr=lr, **options),
                       lambda named: torch_cls(named.values(), lr=lr, **options))


@pytest.mark.parametrize("cls, torch_cls", [(SGD, torch.optim.SGD), (Adam, torch.optim.Adam),
                                            (AdamW, torch.optim.AdamW), (RMSprop, torch.optim.RMSprop)])
def test_param_groups_with_their_own_lr_and_weight_decay(cls, torch_cls):
    """Layer 2 has its own lr and weight decay; layer 1 keeps the base options."""
    base = {"lr": 0.01, "weight_decay": 0.02}
    if cls is SGD:
        base["momentum"] = 0.9

    def make_torch(named):
        return torch_cls([{"params": [named["l1.weight"], named["l1.bias"]]},
                          {"params": [named["l2.weight"], named["l2.bias"]], "lr": 0.03, "weight_decay": 0.2}],
                         **base)

    compare_with_torch(lambda m: cls(m, groups=[ParamGroup(prefix="l2.", lr=0.03, weight_decay=0.2)], **base),
                       make_torch)


def test_regex_group_selects_the_biases():
    compare_with_torch(
        lambda m: Adam(m, lr=0.01, groups=[ParamGroup(regex=r"\.bias$", lr=0.05, betas=(0.5, 0.9))]),
        lambda named: torch.optim.Adam([{"params": [named["l1.weight"], named["l2.weight"]]},
                                        {"params": [named["l1.bias"], named["l2.bias"]], "lr": 0.05,
                                         "betas": (0.5, 0.9)}], lr=0.01))
