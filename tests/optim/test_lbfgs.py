"""LBFGS against torch.optim.LBFGS on the full-batch MLP problem (f64), with and without the
strong-Wolfe line search, and its state save/load."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ember.nn import ParamGroup
from ember.optim import LBFGS

from .problem import MLP, assert_same, batch, ember_grads, ember_loss_and_grads, make_pair, torch_backward


def closures(model, torch_model, torch_opt, x, y):
    def torch_closure():
        torch_opt.zero_grad()
        torch_backward(torch_model, x, y)
        return ((torch_model(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).mean()

    return (lambda: ember_loss_and_grads(model, x, y)), torch_closure


@pytest.mark.parametrize("options", [
    {"max_iter": 8},
    {"max_iter": 10, "history_size": 3, "lr": 0.5},
    {"max_iter": 10, "line_search_fn": "strong_wolfe"},
    {"max_iter": 6, "history_size": 2, "line_search_fn": "strong_wolfe", "max_eval": 9},
], ids=str)
def test_trajectory_matches_torch(options):
    model, torch_model, named = make_pair()
    x, y = batch(n=32)
    opt = LBFGS(model, **options)
    torch_opt = torch.optim.LBFGS(named.values(), **options)
    ember_closure, torch_closure = closures(model, torch_model, torch_opt, x, y)
    for step in range(3):  # 3 steps of up to 10 iterations: the history fills and rolls over
        loss = opt.step(ember_closure)
        torch_loss = torch_opt.step(torch_closure)
        assert loss == pytest.approx(torch_loss.item(), rel=1e-9)
        assert_same(model, named, step, rtol=1e-7, atol=1e-9)
    torch_state = torch_opt.state[torch_opt._params[0]]
    assert opt.history.func_evals == torch_state["func_evals"]
    assert opt.history.n_iter == torch_state["n_iter"]


@pytest.mark.parametrize("via_json", [False, True], ids=["arrays", "json"])
def test_state_dict_resumes_identically(via_json):
    model = make_pair()[0]
    x, y = batch(n=32)
    opt = LBFGS(model, max_iter=4, history_size=5, line_search_fn="strong_wolfe")

    def closure_for(m):
        return lambda: ember_loss_and_grads(m, x, y)

    for _ in range(2):
        opt.step(closure_for(model))
    resumed = MLP()
    resumed.load_state_dict(model.state_dict())
    resumed_opt = LBFGS(resumed, max_iter=4, history_size=5, line_search_fn="strong_wolfe")
    state = opt.state_dict()
    if via_json:
        state = json.loads(json.dumps(state, default=lambda a: a.tolist()))
    resumed_opt.load_state_dict(state)
    for _ in range(2):
        opt.step(closure_for(model))
        resumed_opt.step(closure_for(resumed))
    for (n, p), (_, q) in zip(model.named_parameters(), resumed.named_parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy(), err_msg=n)


def test_bad_use_raises():
    model = make_pair()[0]
    with pytest.raises(ValueError, match="parameter groups are not supported"):
        LBFGS(model, groups=[ParamGroup(prefix="l1.", lr=0.1)])
    with pytest.raises(ValueError, match="line_search_fn must be"):
        LBFGS(model, line_search_fn="armijo")
    opt = LBFGS(model)
    with pytest.raises(TypeError, match="takes a closure"):
        opt.step(ember_grads(model, *batch()))
    with pytest.raises(TypeError, match="must return \\(loss, grads\\)"):
        opt.step(lambda: 1.0)
    frozen = make_pair()[0]
    state = opt.state_dict()
    frozen.freeze(ParamGroup(prefix="l2."))
    with pytest.raises(ValueError, match="differ from this model"):
        LBFGS(frozen).load_state_dict(state)
