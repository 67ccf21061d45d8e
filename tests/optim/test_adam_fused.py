"""Adam/AdamW as one op per parameter (`ember/optim/fused.py`), on every suite device, against
`torch.optim.Adam`/`AdamW` fed the same random gradients: parameters and moments (saved by name from the
packed state) after each step, for f32, f64 and bf16, with AMSGrad, coupled and decoupled weight decay, a
0-d and an empty parameter; a restored state continues the same trajectory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
from ember.autodiff.gradients import Gradients
from ember.errors import DTypeError, ShapeError
from ember.nn import Module
from ember.nn.param import Param, ParamGroup
from ember.optim import Adam, AdamW
from ember.optim.fused import adam_scalars, adam_step

SHAPES = {"a_w": (6, 5), "a_b": (7,), "b_w": (4, 3), "b_s": (), "b_e": (0, 3)}
# (ember class, torch class, base options, options of the "b_" group); amsgrad and wd 0 in the group
ADAM = (Adam, torch.optim.Adam, {"weight_decay": 0.1}, {"amsgrad": True, "weight_decay": 0.0, "betas": (0.8, 0.9)})
ADAMW = (AdamW, torch.optim.AdamW, {}, {"amsgrad": True, "weight_decay": 0.2, "eps": 1e-6})
# dtype: (rtol, atol) after 3 steps with lr 0.05 (torch computes m by lerp, and bf16 op by op)
TOLERANCE = {ember.f32: (1e-5, 1e-6), ember.f64: (1e-12, 1e-14), ember.bf16: (2e-2, 2e-2)}
TORCH = {ember.f32: torch.float32, ember.f64: torch.float64, ember.bf16: torch.bfloat16}
# Each rule and dtype once per device (the trajectory tests of test_torch_optimizers.py run both in f64);
# bf16 without AMSGrad, one kernel specialization fewer to compile on a cold CI cache
CASES = [(ember.f32, *ADAM), (ember.f64, *ADAMW), (ember.bf16, *ADAMW[:3], {"weight_decay": 0.0})]


class Params(Module):
    """A module holding one parameter per entry of `values`."""

    def __init__(self, values: dict) -> None:
        for name, value in values.items():
            setattr(self, name, Param(value))


def as_numpy(t) -> np.ndarray:
    return (t.float() if t.dtype == torch.bfloat16 else t).detach().numpy().astype(np.float64)


@pytest.mark.parametrize("dtype, cls, torch_cls, base, group", CASES, ids=[f"{c[1].__name__}-{c[0]}" for c in CASES])
def test_one_op_update_matches_torch_over_steps(device, rng, dtype, cls, torch_cls, base, group):
    start = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    model = Params({k: ember.from_numpy(v.astype(dtype.np), device.autodiff()) for k, v in start.items()})
    ours = {k: p for k, p in model.named_parameters()}
    theirs = {k: torch.tensor(v).to(TORCH[dtype]).requires_grad_() for k, v in start.items()}
    opt = cls(model, lr=0.05, groups=[ParamGroup(prefix="b_", **group)], **base)
    torch_opt = torch_cls([{"params": [theirs[k] for k in SHAPES if k.startswith("a_")]},
                           {"params": [theirs[k] for k in SHAPES if k.startswith("b_")], **group}], lr=0.05, **base)
    rtol, atol = TOLERANCE[dtype]
    for step in range(3):  # the same random gradients to both (no backward pass: only the update is tested)
        grads = {k: rng.standard_normal(s).astype(np.float32).astype(dtype.np) for k, s in SHAPES.items()}
        opt.step(Gradients.from_pairs((p, ember.from_numpy(grads[k], device)) for k, p in ours.items()))
        for k, t in theirs.items():
            t.grad = torch.tensor(grads[k].astype(np.float32)).to(TORCH[dtype])
        torch_opt.step()
        for k, p in ours.items():
            assert p.dtype is dtype and p.shape == SHAPES[k]
            np.testing.assert_allclose(p.numpy().astype(np.float64), as_numpy(theirs[k]), rtol=rtol, atol=atol,
                                       err_msg=f"{k} after step {step}")
    saved = opt.state_dict()["params"]
    for k, t in theirs.items():  # the moments too, AMSGrad's maximum included, as state_dict saves them
        for key, value in torch_opt.state[t].items():
            if key != "step":
                np.testing.assert_allclose(saved[k][key].astype(np.float64), as_numpy(value),
                                           rtol=rtol, atol=atol, err_msg=f"{k}.{key}")


def test_a_restored_state_continues_the_trajectory(device, rng):
    """state_dict saves the packed moments by name; load_state_dict packs them again: a fresh optimizer
    given the state steps exactly as the original (bitwise: the same kernel on the same values)."""
    start = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}

    def make():
        model = Params({k: ember.from_numpy(v, device.autodiff()) for k, v in start.items()})
        return model, AdamW(model, lr=0.05, groups=[ParamGroup(prefix="b_", amsgrad=True)])
    grads = [{k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()} for _ in range(3)]

    def step(model, opt, g):
        opt.step(Gradients.from_pairs((p, ember.from_numpy(g[k], device)) for k, p in model.named_parameters()))
    model, opt = make()
    for g in grads[:2]:
        step(model, opt, g)
    other, resumed = make()
    for k, p in other.named_parameters():
        p.set(ember.from_numpy(dict(model.named_parameters())[k].numpy(), device.autodiff()))
    resumed.load_state_dict(opt.state_dict())
    assert resumed.state["b_w"]["packed"].shape == (16, 3) and resumed.state["a_w"]["packed"].shape == (18, 5)
    step(model, opt, grads[2])
    step(other, resumed, grads[2])
    for k, p in model.named_parameters():
        np.testing.assert_array_equal(dict(other.named_parameters())[k].numpy(), p.numpy(), err_msg=k)


def test_a_step_dispatches_one_update_and_one_view_per_parameter(monkeypatch):
    """The moments stay packed in the state: a step runs one update and one slice per parameter (a 0-d
    one's also reshaped; an empty one's new value is the packed result itself), the first step too
    (no zero moments are made)."""
    device = ember.Device.numpy()
    model = Params({k: ember.ones(*s, device=device.autodiff()) for k, s in SHAPES.items()})
    opt = AdamW(model, lr=0.1, groups=[ParamGroup(prefix="b_", amsgrad=True)])

    def grads():
        return Gradients.from_pairs((p, ember.ones(*p.shape, device=device)) for _, p in model.named_parameters())
    backend = device.backend
    for first in (True, False):
        given = grads()
        ran = []
        monkeypatch.setattr(backend, "execute", lambda prim, arrays, params, out: ran.append(
            (prim.name, params.get("first"))) or type(backend).execute(backend, prim, arrays, params, out))
        opt.step(given)
        monkeypatch.undo()
        assert ran.count(("adam_update", first)) == len(SHAPES) and len(ran) == 2 * len(SHAPES), ran
        assert ran.count(("slice", None)) == len(SHAPES) - 1 and ran.count(("reshape", None)) == 1


def test_bad_operands_are_named(device):
    def zeros(*shape, dtype=np.float32):
        return ember.from_numpy(np.zeros(shape, dtype), device)  # no kernel: the rules refuse before any runs
    p = zeros(3, 2)
    s = adam_scalars(p, lr=0.1, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.0, decoupled=True, step=1)
    with pytest.raises(ShapeError, match="adam_update.*grad has shape \\(2, 3\\), the parameter \\(3, 2\\)"):
        adam_step(p, zeros(2, 3), None, s, amsgrad=False)
    with pytest.raises(ShapeError, match="moments .* has shape \\(9, 2\\); .* needs \\(12, 2\\)"):
        adam_step(p, p, zeros(9, 2), s, amsgrad=True)
    with pytest.raises(ShapeError, match="scalars must have shape \\(9,\\)"):
        adam_step(p, p, None, zeros(3), amsgrad=False)
    d = zeros(3, 2, dtype=np.float64)
    with pytest.raises(DTypeError, match="scalars must be f64 for a f64 parameter"):
        adam_step(d, d, None, s, amsgrad=False)
    with pytest.raises(DTypeError, match="moments .* must be f32, the parameter's dtype, got f64"):
        adam_step(p, p, zeros(9, 2, dtype=np.float64), s, amsgrad=False)
    with pytest.raises(DTypeError, match="grad must have a float dtype, got i32"):
        adam_step(p, zeros(3, 2, dtype=np.int32), None, s, amsgrad=False)
    with pytest.raises(DTypeError, match="parameters must have a float dtype, got i32"):
        adam_step(zeros(3, 2, dtype=np.int32), p, None, s, amsgrad=False)
    huge = zeros(1).expand(2**30)  # a view: nothing allocated; refused at the call, as its packed rows
    with pytest.raises(ShapeError, match="more than 2\\*\\*31 - 1 elements"):  # could not be indexed
        adam_step(huge, huge, None, adam_scalars(huge, lr=0.1, betas=(0.9, 0.99), eps=1e-8,
                                                 weight_decay=0.0, decoupled=True, step=1), amsgrad=False)


def test_a_step_shares_one_scalars_tensor_and_lets_go_of_the_last_steps(device):
    """`adam_scalars` gives the parameters of one step one tensor, and keeps no earlier step's: on a
    device the next one can land where it was (a plan reading it meets the same address each step)."""
    import gc
    import weakref

    p = ember.zeros(3, device=device)
    options = dict(lr=0.1, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=True)
    first = adam_scalars(p, step=1, **options)
    assert adam_scalars(p, step=1, **options) is first
    gone = weakref.ref(first)
    del first
    second = adam_scalars(p, step=2, **options)
    gc.collect()
    assert gone() is None and adam_scalars(p, step=2, **options) is second
    np.testing.assert_allclose(second.numpy()[-1], 0.1 / (1 - 0.9 ** 2), rtol=1e-6)  # step_size of step 2
