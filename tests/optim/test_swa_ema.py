"""`optim.EMA`, `AveragedModel`, `SWALR` and `update_bn` (ember/optim/ema.py, swa.py) against
`torch.optim.swa_utils` on the same sequences of weights, schedules and batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
from ember.nn import BatchNorm1d, Linear, Sequential
from ember.optim import EMA, SGD, SWALR, AveragedModel, get_ema_avg_fn, update_bn


def _models(device, dtype=torch.float64):
    """An ember model and its torch twin (same structure and names), with BN buffers."""
    e = Sequential(Linear(3, 5), BatchNorm1d(5), Linear(5, 2)).to(device, "f64" if dtype == torch.float64 else "f32")
    t = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 2)).to(dtype)
    return e, t


def _set_weights(e, t, rng, with_buffers: bool):
    """Give both models the same random parameters (and float buffers)."""
    state = t.state_dict()
    for name, value in state.items():
        if value.is_floating_point() and (with_buffers or name in dict(t.named_parameters())):
            value.copy_(torch.from_numpy(rng.standard_normal(tuple(value.shape))))
    if with_buffers:
        state["1.num_batches_tracked"].add_(1)
    e.load_state_dict({k: ember.tensor(v.numpy()) for k, v in state.items()})


def _assert_same_state(e_state, t_state, rtol):
    assert sorted(e_state) == sorted(t_state)
    for name, t_value in t_state.items():
        if t_value.is_floating_point():  # torch's EMA truncates integer buffers; ember copies them
            np.testing.assert_allclose(e_state[name].numpy(), t_value.numpy(), rtol=rtol, atol=rtol, err_msg=name)


@pytest.mark.parametrize("kind", ["swa", "ema", "ema-buffers"])
def test_averaged_model_follows_torch(kind, device, rng):
    with_buffers = kind == "ema-buffers"
    e_model, t_model = _models(device.autodiff())
    if kind == "swa":
        e_avg, t_avg = AveragedModel(e_model), torch.optim.swa_utils.AveragedModel(t_model)
    else:
        e_avg = AveragedModel(e_model, avg_fn=get_ema_avg_fn(0.9), use_buffers=with_buffers)
        t_avg = torch.optim.swa_utils.AveragedModel(
            t_model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.9), use_buffers=with_buffers)
    for _ in range(4):
        _set_weights(e_model, t_model, rng, with_buffers=True)
        e_avg.update_parameters(e_model)
        t_avg.update_parameters(t_model)
        _assert_same_state(e_avg.state_dict(), t_avg.state_dict(), 1e-12)
    assert int(e_avg.n_averaged.item()) == int(t_avg.n_averaged) == 4
    x = rng.standard_normal((4, 3))
    e_avg.eval(), t_avg.eval()
    np.testing.assert_allclose(e_avg(ember.tensor(x, device=device)).numpy(),
                               t_avg(torch.from_numpy(x)).detach().numpy(), rtol=1e-12)


def test_ema_is_averaged_model_with_ema_rule(rng):
    """EMA(decay) is torch's AveragedModel with get_ema_multi_avg_fn(decay) and use_buffers=True; with
    warmup its decay ramps as timm's, checked through torch's avg_fn hook with that formula."""
    for warmup in (False, True):
        e_model, t_model = _models(None)
        ema = EMA(e_model, decay=0.95, warmup=warmup)

        def ramp(avg, cur, n):  # timm ModelEmaV3: min(decay, 1 - (1 + n) ** -(2/3))
            d = min(0.95, 1 - (1 + int(n)) ** (-2 / 3)) if warmup else 0.95
            return d * avg + (1 - d) * cur

        t_avg = torch.optim.swa_utils.AveragedModel(t_model, avg_fn=ramp, use_buffers=True)
        for _ in range(5):
            _set_weights(e_model, t_model, rng, with_buffers=True)
            ema.update(e_model)
            t_avg.update_parameters(t_model)
        _assert_same_state(ema.state_dict(), t_avg.state_dict(), 1e-12)
        assert ema.decay_at(1) == (pytest.approx(1 - 2 ** (-2 / 3)) if warmup else 0.95)
        target, _ = _models(None)
        ema.copy_to(target)
        for name, value in ema.module.state_dict().items():
            np.testing.assert_array_equal(target.state_dict()[name].numpy(), value.numpy())


def test_ema_state_dict_loads_into_a_fresh_one(rng):
    e_model, t_model = _models(None)
    ema = EMA(e_model, decay=0.5)
    for _ in range(2):
        _set_weights(e_model, t_model, rng, with_buffers=False)
        ema.update(e_model)
    again = EMA(_models(None)[0], decay=0.5)
    assert again.load_state_dict(ema.state_dict()).ok
    assert int(again.n_averaged.item()) == 2
    _set_weights(e_model, t_model, rng, with_buffers=False)
    ema.update(e_model), again.update(e_model)
    for name, value in ema.state_dict().items():
        np.testing.assert_array_equal(again.state_dict()[name].numpy(), value.numpy())


def test_torch_module_name_imports():
    from ember.optim.swa_utils import SWALR as swalr, AveragedModel as averaged, update_bn as bn
    assert (averaged, swalr, bn) == (AveragedModel, SWALR, update_bn)
    assert ember.optim.swa_utils.get_ema_avg_fn is get_ema_avg_fn


def test_update_parameters_refuses_another_structure():
    avg = AveragedModel(Linear(3, 2))
    with pytest.raises(ember.ShapeError, match="AveragedModel.update_parameters"):
        avg.update_parameters(Linear(3, 4))


@pytest.mark.parametrize("strategy", ["cos", "linear"])
def test_swalr_follows_torch(strategy):
    for anneal_epochs, start in ((3, 1.0), (0, 1.0), (4, 0.3)):
        model = Linear(2, 1)
        opt = SGD(model, lr=1.0)
        opt.lr = start                      # SWALR starts from the lr it finds, as torch's
        sched = SWALR(opt, swa_lr=0.05, anneal_epochs=anneal_epochs, anneal_strategy=strategy)
        t_opt = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=start)
        t_sched = torch.optim.swa_utils.SWALR(t_opt, swa_lr=0.05, anneal_epochs=anneal_epochs,
                                              anneal_strategy=strategy)
        ours, theirs = [opt.lr], [t_opt.param_groups[0]["lr"]]
        for _ in range(7):
            t_opt.step()
            t_sched.step()
            ours.append(sched.step())
            theirs.append(t_opt.param_groups[0]["lr"])
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, err_msg=f"anneal_epochs={anneal_epochs}")
    with pytest.raises(ValueError, match="SWALR: anneal_strategy"):
        SWALR(opt, swa_lr=0.1, anneal_strategy="step")


def test_update_bn_follows_torch(device, rng):
    e_model, t_model = _models(device.autodiff())
    _set_weights(e_model, t_model, rng, with_buffers=True)
    e_model[1].momentum = t_model[1].momentum = 0.3
    e_model.eval(), t_model.eval()
    batches = [rng.standard_normal((n, 3)) for n in (4, 7, 5)]
    update_bn([(ember.tensor(b, device=device), 0) for b in batches], e_model)
    torch.optim.swa_utils.update_bn([(torch.from_numpy(b), 0) for b in batches], t_model)
    e_state, t_state = e_model.state_dict(), t_model.state_dict()
    _assert_same_state(e_state, t_state, 1e-10)
    assert int(e_state["1.num_batches_tracked"].item()) == int(t_state["1.num_batches_tracked"]) == 3
    assert e_model[1].momentum == 0.3 and not e_model.training and not e_model[1].training
