"""Optimizer state saved mid-run and loaded into a copy of the model resumes the identical trajectory."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ember.errors import ShapeError
from ember.nn import ParamGroup
from ember.optim import SGD, AdaGrad, Adam, AdamW, Adan, Lion, Muon, RMSprop

from .problem import MLP, batch, ember_grads, make_pair

MAKERS = {
    "SGD": lambda m: SGD(m, lr=0.05, momentum=0.9, nesterov=True),
    "Adam": lambda m: Adam(m, lr=0.01, amsgrad=True),
    "AdamW+SGD": lambda m: AdamW(m, lr=0.01, groups=[ParamGroup(prefix="l2.", optimizer=SGD, lr=0.1, momentum=0.5)]),
    "AdaGrad": lambda m: AdaGrad(m, lr=0.05),
    "RMSprop": lambda m: RMSprop(m, lr=0.005, centered=True, momentum=0.5),
    "Adan": lambda m: Adan(m, lr=0.01),
    "Lion": lambda m: Lion(m, lr=0.003),
    "Muon": lambda m: Muon(m, lr=0.02),
}


def train(model, opt, steps: range) -> None:
    for step in steps:
        opt.step(ember_grads(model, *batch(seed=step)))


def copy_of(model) -> MLP:
    fresh = MLP()
    fresh.load_state_dict(model.state_dict())
    return fresh


@pytest.mark.parametrize("via_json", [False, True], ids=["arrays", "json"])
@pytest.mark.parametrize("name", MAKERS)
def test_resume_from_state_dict_gives_the_identical_trajectory(name, via_json):
    make = MAKERS[name]
    model = make_pair()[0]
    opt = make(model)
    train(model, opt, range(10))
    state = opt.state_dict()
    if via_json:
        state = json.loads(json.dumps(state, default=lambda a: a.tolist()))
    resumed = copy_of(model)
    resumed_opt = make(resumed)
    resumed_opt.load_state_dict(state)
    train(model, opt, range(10, 20))
    train(resumed, resumed_opt, range(10, 20))
    for (n, p), (_, q) in zip(model.named_parameters(), resumed.named_parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy(), err_msg=n)
    assert resumed_opt.steps == opt.steps == 20


def test_state_dict_holds_host_arrays_and_scalars_by_param_name():
    model = make_pair()[0]
    opt = Adam(model, lr=0.01)
    train(model, opt, range(2))
    opt.lr = 0.005
    state = opt.state_dict()
    assert state["optimizer"] == "Adam" and state["lr"] == 0.005 and state["steps"] == 2
    entry = state["params"]["l1.weight"]
    assert entry["step"] == 2 and isinstance(entry["exp_avg"], np.ndarray) and entry["exp_avg"].shape == (8, 4)
    fresh = Adam(copy_of(model), lr=0.01)
    fresh.load_state_dict(state)
    assert fresh.lr == 0.005


def test_load_state_dict_rejects_mismatches():
    model = make_pair()[0]
    opt = Adam(model, lr=0.01)
    train(model, opt, range(1))
    state = opt.state_dict()
    with pytest.raises(ValueError, match="state is of optimizer 'Adam'"):
        SGD(model, lr=0.1).load_state_dict(state)
    renamed = {**state, "params": {"l9.weight": state["params"]["l1.weight"]}}
    with pytest.raises(KeyError, match="unknown parameter"):
        Adam(model, lr=0.01).load_state_dict(renamed)
    swapped = {**state, "params": {"l1.bias": state["params"]["l1.weight"]}}
    with pytest.raises(ShapeError, match="l1.bias.exp_avg has shape"):
        Adam(model, lr=0.01).load_state_dict(swapped)
    with pytest.raises(ValueError, match="delegated group"):
        Adam(model, lr=0.01, groups=[ParamGroup(prefix="l2.", optimizer=SGD)]).load_state_dict(state)
