"""Every schedule against the lr sequence of torch.optim.lr_scheduler (Noam against its formula)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch.optim import lr_scheduler as T

from ember.nn import ParamGroup
from ember.optim import SGD
from ember.optim.lr import (Composed, Constant, CosineAnnealing, Exponential, Linear, MultiStep, Noam, OneCycle,
                            Sequential, Step)

from .problem import MLP

BASE = 0.1

# (id, ember scheduler from an optimizer, torch scheduler from an optimizer, steps)
CASES = [
    ("constant", lambda o: Constant(o, factor=0.5, total_iters=4), lambda o: T.ConstantLR(o, 0.5, 4), 10),
    ("step", lambda o: Step(o, step_size=3, gamma=0.5), lambda o: T.StepLR(o, 3, 0.5), 20),
    ("multistep", lambda o: MultiStep(o, [8, 3, 12], gamma=0.3), lambda o: T.MultiStepLR(o, [3, 8, 12], 0.3), 20),
    ("exponential", lambda o: Exponential(o, 0.9), lambda o: T.ExponentialLR(o, 0.9), 30),
    ("cosine", lambda o: CosineAnnealing(o, T_max=10, eta_min=0.01), lambda o: T.CosineAnnealingLR(o, 10, 0.01), 25),
    ("cosine-warmup",
     lambda o: CosineAnnealing(o, T_max=12, warmup=5, warmup_start=0.1),
     lambda o: T.SequentialLR(o, [T.LinearLR(o, 0.1, 1.0, 5), T.CosineAnnealingLR(o, 12)], milestones=[5]), 17),
    ("linear", lambda o: Linear(o, start_factor=0.25, end_factor=0.75, total_iters=8),
     lambda o: T.LinearLR(o, 0.25, 0.75, 8), 12),
    ("onecycle-cos", lambda o: OneCycle(o, max_lr=1.0, total_steps=20),
     lambda o: T.OneCycleLR(o, 1.0, total_steps=20, cycle_momentum=False), 19),
    ("onecycle-linear-3phase",
     lambda o: OneCycle(o, max_lr=0.5, total_steps=30, pct_start=0.25, anneal_strategy="linear", three_phase=True),
     lambda o: T.OneCycleLR(o, 0.5, total_steps=30, pct_start=0.25, anneal_strategy="linear", three_phase=True,
                            cycle_momentum=False), 29),
    ("sequential",
     lambda o: Sequential(o, [Constant(o, 0.5, 2), Exponential(o, 0.8), Step(o, 2)], milestones=[4, 9]),
     lambda o: T.SequentialLR(o, [T.ConstantLR(o, 0.5, 2), T.ExponentialLR(o, 0.8), T.StepLR(o, 2)], [4, 9]), 16),
    ("composed", lambda o: Composed(o, [Linear(o, 0.2, 1.0, 6), Exponential(o, 0.9), Step(o, 4, 0.5)]),
     lambda o: T.ChainedScheduler([T.LinearLR(o, 0.2, 1.0, 6), T.ExponentialLR(o, 0.9), T.StepLR(o, 4, 0.5)]), 15),
]


def torch_lrs(make, steps: int) -> list[float]:
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=BASE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch warns about stepping a scheduler before the optimizer
        sched = make(opt)
        lrs = [opt.param_groups[0]["lr"]]
        for _ in range(steps):
            opt.step()
            sched.step()
            lrs.append(opt.param_groups[0]["lr"])
    return lrs


@pytest.mark.parametrize("make, make_torch, steps", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_lr_sequence_matches_torch(make, make_torch, steps):
    opt = SGD(MLP(), lr=BASE)
    sched = make(opt)
    lrs = [opt.lr]
    for _ in range(steps):
        assert sched.step() == opt.lr == sched.lr
        lrs.append(opt.lr)
    assert lrs == pytest.approx(torch_lrs(make_torch, steps), rel=1e-12, abs=1e-15)


def test_noam_follows_its_formula():
    opt = SGD(MLP(), lr=2.0)
    sched = Noam(opt, d_model=64, warmup=10)
    lrs = [opt.lr] + [sched.step() for _ in range(40)]
    expected = [2.0 * 64 ** -0.5 * min(s ** -0.5, s * 10 ** -1.5) for s in range(1, 42)]
    assert lrs == pytest.approx(expected, rel=1e-14)
    assert max(lrs) == pytest.approx(2.0 / math.sqrt(64 * 10))
    assert lrs.index(max(lrs)) == 9


def test_group_lrs_follow_the_schedule_by_ratio():
    model = MLP()
    opt = SGD(model, lr=0.1, groups=[ParamGroup(prefix="l2.", lr=0.3)])
    sched = Exponential(opt, 0.5)
    sched.step()
    sched.step()
    assert opt.lr == pytest.approx(0.025)
    assert opt._lr_of(opt._entries[2]) == pytest.approx(0.075)


def test_resume_from_state_dict():
    opt = SGD(MLP(), lr=BASE)
    sched = CosineAnnealing(opt, T_max=20, warmup=3)
    for _ in range(7):
        sched.step()
    resumed_opt = SGD(MLP(), lr=BASE)
    resumed = CosineAnnealing(resumed_opt, T_max=20, warmup=3)
    resumed.load_state_dict(sched.state_dict())
    assert resumed_opt.lr == opt.lr and resumed.t == 7
    assert [resumed.step() for _ in range(5)] == [sched.step() for _ in range(5)]
    with pytest.raises(ValueError, match="state is of scheduler 'CosineAnnealing'"):
        Step(resumed_opt, 3).load_state_dict(sched.state_dict())


def test_onecycle_refuses_to_step_past_its_end():
    opt = SGD(MLP(), lr=BASE)
    sched = OneCycle(opt, max_lr=1.0, total_steps=3)
    for _ in range(3):
        sched.step()
    assert opt.lr == pytest.approx(1.0 / 25 / 1e4)  # the final lr, kept at t = total_steps
    with pytest.raises(ValueError, match="past total_steps=3"):
        sched.step()


@pytest.mark.parametrize("make, message", [
    (lambda o: Step(o, step_size=0), "step_size must be > 0"),
    (lambda o: Step(o, step_size=2.5), "step_size must be an int"),
    (lambda o: CosineAnnealing(o, T_max=10, warmup_start=2), "warmup_start must be <= 1"),
    (lambda o: OneCycle(o, 1.0, 10, anneal_strategy="exp"), "anneal_strategy"),
    (lambda o: Sequential(o, [Step(o, 2), Step(o, 3)], milestones=[]), "need 1 milestone"),
    (lambda o: Sequential(o, [Step(SGD(MLP(), lr=1.0), 2)], milestones=[]), "same optimizer"),
    (lambda o: Composed(o, []), "at least one scheduler"),
    (lambda o: Step(object(), 2), "schedules an ember Optimizer"),
])
def test_bad_arguments_raise_naming_the_problem(make, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make(SGD(MLP(), lr=BASE))
