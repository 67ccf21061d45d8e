"""Donation (`ember/backend/cube/fused/donation.py`): on a fused device Adam's update writes its new state over
the previous one when nothing else can see the previous one, trains exactly as without, makes a step's
memory land where it did the step before, and never writes over a state or parameter someone still holds."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.debug
import ember.nn.functional as F
from ember.cube.runtime.host import host_pool
from ember.nn import Linear, Module
from ember.optim import AdamW


class MLP(Module):
    """128 -> 256 -> 4: the first layer's packed state (384 KiB) lives on large pages of the pool."""

    def __init__(self, device) -> None:
        self.a = Linear(128, 256, device=device)
        self.b = Linear(256, 4, device=device)

    def forward(self, x):
        return self.b(F.relu(self.a(x)))


def setup(device, seed: int = 0):
    ember.seed(seed)
    model = MLP(device.autodiff())
    rng = np.random.default_rng(seed)
    x = ember.from_numpy(rng.standard_normal((16, 128)).astype(np.float32), device.autodiff())
    y = ember.from_numpy(rng.standard_normal((16, 4)).astype(np.float32), device.autodiff())
    return model, AdamW(model, lr=0.01), x, y


def step(model, opt, x, y) -> float:
    loss = F.mse_loss(model(x), y)
    opt.step(loss.backward())
    return loss.item()


def address(opt, name: str):
    """Where the optimizer's packed state of parameter `name` is (its update run first). Only the address
    is kept: a test holding the array would keep it from being written over. Two consecutive steps can
    share it only by writing over it: without that the new state is made while the old one is alive."""
    state = opt.state[name]["packed"]
    state.device.sync()
    return where(state._handle.value)


def where(array):
    """(page, offset) of a device array's pool slice, or a NumPy array's data pointer."""
    memory = getattr(array, "memory", None)
    return (id(memory.page), memory.offset) if memory is not None else array.ctypes.data


def params(model) -> dict:
    return {k: p.numpy().copy() for k, p in model.named_parameters()}


def test_the_state_is_updated_in_place_and_training_is_unchanged(fused):
    model, opt, x, y = setup(fused)
    ref_model, ref_opt, ref_x, ref_y = setup(ember.Device.numpy())
    addresses = []
    for _ in range(6):
        assert step(model, opt, x, y) == pytest.approx(step(ref_model, ref_opt, ref_x, ref_y), rel=1e-5)
        addresses.append(address(opt, "a.weight"))
    # The first step makes the state (nothing to write over), every later one writes over it.
    assert len(set(addresses)) == 1, "the packed state was not written over"
    for k, v in params(ref_model).items():
        np.testing.assert_allclose(params(model)[k], v, rtol=1e-4, atol=2e-5, err_msg=k)  # summation orders


def test_a_step_reserves_the_same_addresses_as_the_step_before(cpu):
    # The CPU's host pool (CUDA's pool is the same class, measured on the GPT step in bench/RESULTS.md);
    # wgpu retires its arrays' slices after the queue's work, so when they are free again varies.
    model, opt, x, y = setup(cpu)
    for _ in range(3):
        step(model, opt, x, y)
    pool = host_pool()
    traces = []
    for _ in range(3):
        pool.trace = trace = []
        step(model, opt, x, y)
        pool.trace = None
        traces.append([(n, id(s.page), s.offset) for n, s in (e for e in trace if type(e) is tuple)])
    assert traces[0] and traces[0] == traces[1] == traces[2]


def test_an_old_parameter_someone_holds_keeps_its_values(fused):
    model, opt, x, y = setup(fused)
    step(model, opt, x, y)
    step(model, opt, x, y)
    before, other = address(opt, "a.weight"), address(opt, "b.weight")
    old = model.a.weight.value  # the user keeps the old value: its memory is the old state's first row
    kept = old.numpy().copy()
    step(model, opt, x, y)
    np.testing.assert_array_equal(old.numpy(), kept)
    assert address(opt, "a.weight") != before  # a new array for the held one
    assert address(opt, "b.weight") == other    # the others are still written over
    assert not np.array_equal(model.a.weight.numpy(), kept)


def test_an_old_state_someone_holds_keeps_its_values(fused):
    model, opt, x, y = setup(fused)
    step(model, opt, x, y)
    step(model, opt, x, y)
    old = opt.state["a.bias"]["packed"]
    kept = old.numpy().copy()
    before = where(old._handle.value)
    step(model, opt, x, y)
    np.testing.assert_array_equal(old.numpy(), kept)
    assert address(opt, "a.bias") != before


def test_a_block_that_fails_after_writing_over_its_input_raises_instead_of_running_again(cpu, monkeypatch):
    # A fused kernel that fails makes its block run again op by op (a fusion bug, warned); once an update
    # wrote over its input, that rerun would read the new state as the old one: the block's values raise.
    from ember.backend.fusion.plan import Plan
    model, opt, x, y = setup(cpu)
    step(model, opt, x, y)
    step(model, opt, x, y)
    run = Plan._run

    def failing(self, records, externals, inner, donated):
        values = run(self, records, externals, inner, donated)
        if donated:
            raise RuntimeError("a fused kernel failed")
        return values
    monkeypatch.setattr(Plan, "_run", failing)
    with pytest.raises(RuntimeError, match="a fused kernel failed"):
        step(model, opt, x, y)  # the last step's updates run at its first sync
        cpu.sync()
    with pytest.raises(RuntimeError, match="not computed"):
        model.a.weight.numpy()


# Sizes at, below and past the kernels' 256-unit cube, none a multiple of it but one: a shifted launch
# computes a few positions twice, which over a donated state read what the first pass wrote.
ODD = [(19, 16), (33, 17), (100, 50), (16, 16), (7, 9), (257,)]


@pytest.mark.parametrize("torch_name, options", [("Adam", {}), ("AdamW", {"weight_decay": 0.1}),
                                                 ("Adam", {"amsgrad": True, "weight_decay": 0.05})])
def test_updates_written_over_odd_sized_states_follow_torch(fused, torch_name, options):
    # A user's loop: a backward pass, the update, the loss read; each weight is a parameter of its own.
    import torch
    rng = np.random.default_rng(1)
    start = [rng.standard_normal(s).astype(np.float32) for s in ODD]
    xs = [rng.standard_normal((8, s[0])).astype(np.float32) for s in ODD]

    class Weights(Module):
        def __init__(self) -> None:
            for k, w in enumerate(start):
                setattr(self, f"w{k}", ember.nn.Param(ember.tensor(w)))

    device = fused.autodiff()
    model = Weights().to(device)
    opt = getattr(ember.optim, torch_name)(model, lr=1e-2, **options)
    theirs = [torch.tensor(w, requires_grad=True) for w in start]
    torch_opt = getattr(torch.optim, torch_name)(theirs, lr=1e-2, **options)
    inputs = [ember.tensor(x, device=device) for x in xs]
    addresses = []
    for _ in range(4):
        loss = sum(((x @ getattr(model, f"w{k}")) if len(s) == 2 else x[:, :1] * getattr(model, f"w{k}")).square().sum()
                   for k, (x, s) in enumerate(zip(inputs, ODD)))
        opt.step(loss.backward())
        loss.item()
        torch_opt.zero_grad()
        sum(((torch.from_numpy(x) @ t) if len(s) == 2 else torch.from_numpy(x)[:, :1] * t).square().sum()
            for x, t, s in zip(xs, theirs, ODD)).backward()
        torch_opt.step()
        addresses.append([address(opt, f"w{k}") for k in range(len(ODD))])
    assert addresses[1] == addresses[2] == addresses[3], "the states were not written over"
    for k, t in enumerate(theirs):
        np.testing.assert_allclose(getattr(model, f"w{k}").numpy(), t.detach().numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=f"w{k} of shape {ODD[k]}")
