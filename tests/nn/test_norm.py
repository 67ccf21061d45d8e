"""Normalization layers against torch.nn: outputs, input and parameter gradients, running statistics
in training and their use in eval, functional forms, errors and Module features."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
from ember import nn
from ember.errors import ShapeError
from ember.nn import functional as F

from .compare import DEVICE, assert_close, compare, compare_module, load_from_torch, to_ember

BATCH_NORMS = [(nn.BatchNorm1d, torch.nn.BatchNorm1d, (6, 3)), (nn.BatchNorm1d, torch.nn.BatchNorm1d, (4, 3, 5)),
               (nn.BatchNorm2d, torch.nn.BatchNorm2d, (3, 3, 4, 2)),
               (nn.BatchNorm3d, torch.nn.BatchNorm3d, (2, 3, 2, 3, 2))]


def _randomize(torch_module, rng):
    """Give a torch module random parameters and running statistics so nothing is trivially 1 or 0."""
    with torch.no_grad():
        for name, t in torch_module.state_dict().items():
            if t.dtype.is_floating_point:
                t.copy_(torch.tensor(rng.uniform(0.5, 1.5, t.shape) if "var" in name or name == "weight"
                                     else rng.standard_normal(t.shape)))
    return torch_module


@pytest.mark.parametrize("ours, theirs, shape", BATCH_NORMS, ids=["1d-2", "1d-3", "2d", "3d"])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_batch_norm_train_then_eval(ours, theirs, shape, momentum, rng):
    tm = _randomize(theirs(3, momentum=momentum, dtype=torch.float64), rng)
    em = load_from_torch(ours(3, momentum=momentum, dtype="f64"), tm)
    for _ in range(2):  # two steps: the running statistics are blended twice
        compare_module(em, tm, [rng.standard_normal(shape) * 2 + 1], rng)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        assert_close(getattr(em, name), getattr(tm, name), what=name)
    em.eval(), tm.eval()
    compare_module(em, tm, [rng.standard_normal(shape)], rng)
    assert int(em.num_batches_tracked.item()) == 2  # eval does not count batches


@pytest.mark.parametrize("affine, track", [(False, True), (True, False), (False, False)])
def test_batch_norm_options(affine, track, rng):
    tm = torch.nn.BatchNorm2d(2, affine=affine, track_running_stats=track, eps=1e-3, dtype=torch.float64)
    em = load_from_torch(nn.BatchNorm2d(2, affine=affine, track_running_stats=track, eps=1e-3, dtype="f64"), tm)
    assert (em.weight is None) == (not affine) and (em.running_mean is None) == (not track)
    compare_module(em, tm, [rng.standard_normal((3, 2, 2, 2))], rng)
    em.eval(), tm.eval()
    compare_module(em, tm, [rng.standard_normal((3, 2, 2, 2))], rng)


def test_batch_norm_errors():
    bn = nn.BatchNorm1d(3)
    with pytest.raises(ShapeError, match=r"3 channels in dim 1, got shape \(2, 4\)"):
        bn(ember.zeros(2, 4))
    with pytest.raises(ShapeError, match="more than 1 value per channel"):
        bn(ember.zeros(1, 3))
    with pytest.raises(ShapeError, match="4-d"):
        nn.BatchNorm2d(3)(ember.zeros(2, 3, 4))


@pytest.mark.parametrize("ours, theirs, shape", [(nn.InstanceNorm1d, torch.nn.InstanceNorm1d, (3, 2, 5)),
                                                 (nn.InstanceNorm1d, torch.nn.InstanceNorm1d, (2, 6)),
                                                 (nn.InstanceNorm2d, torch.nn.InstanceNorm2d, (2, 2, 3, 4))],
                         ids=["1d", "1d-unbatched", "2d"])
@pytest.mark.parametrize("affine, track", [(False, False), (True, False), (True, True)])
def test_instance_norm(ours, theirs, shape, affine, track, rng):
    tm = _randomize(theirs(2, affine=affine, track_running_stats=track, dtype=torch.float64), rng)
    em = load_from_torch(ours(2, affine=affine, track_running_stats=track, dtype="f64"), tm)
    compare_module(em, tm, [rng.standard_normal(shape) + 0.5], rng)
    if track:
        assert_close(em.running_mean, tm.running_mean, what="running_mean")
        assert_close(em.running_var, tm.running_var, what="running_var")
    em.eval(), tm.eval()
    compare_module(em, tm, [rng.standard_normal(shape)], rng)


@pytest.mark.parametrize("normalized, shape", [(4, (3, 4)), ((2, 3), (2, 2, 3))])
@pytest.mark.parametrize("affine, bias", [(True, True), (True, False), (False, False)])
def test_layer_norm(normalized, shape, affine, bias, rng):
    tm = _randomize(torch.nn.LayerNorm(normalized, elementwise_affine=affine, bias=bias, dtype=torch.float64), rng)
    em = load_from_torch(nn.LayerNorm(normalized, elementwise_affine=affine, bias=bias, dtype="f64"), tm)
    compare_module(em, tm, [rng.standard_normal(shape) * 3], rng)


@pytest.mark.parametrize("groups", [1, 2, 4])
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm(groups, affine, rng):
    tm = _randomize(torch.nn.GroupNorm(groups, 4, affine=affine, dtype=torch.float64), rng)
    em = load_from_torch(nn.GroupNorm(groups, 4, affine=affine, dtype="f64"), tm)
    compare_module(em, tm, [rng.standard_normal((2, 4, 3))], rng)
    compare_module(em, tm, [rng.standard_normal((2, 4, 2, 3))], rng)


@pytest.mark.parametrize("eps", [None, 1e-3])
@pytest.mark.parametrize("affine", [True, False])
def test_rms_norm(eps, affine, rng):
    tm = _randomize(torch.nn.RMSNorm((2, 3), eps=eps, elementwise_affine=affine, dtype=torch.float64), rng)
    em = load_from_torch(nn.RMSNorm((2, 3), eps=eps, elementwise_affine=affine, dtype="f64"), tm)
    compare_module(em, tm, [rng.standard_normal((4, 2, 3)) * 0.1], rng)


def test_functional_forms(rng):
    x, w, b = rng.standard_normal((2, 4, 3)), rng.standard_normal(3), rng.standard_normal(3)
    compare(lambda a, c, d: F.layer_norm(a, 3, c, d), lambda a, c, d: torch.nn.functional.layer_norm(a, (3,), c, d),
            [x, w, b], grad=[0, 1, 2], rng=rng)
    cw = rng.standard_normal(4)
    compare(lambda a, c: F.group_norm(a, 2, c), lambda a, c: torch.nn.functional.group_norm(a, 2, c),
            [x, cw], grad=[0, 1], rng=rng)
    compare(lambda a, c: F.instance_norm(a, c), lambda a, c: torch.nn.functional.instance_norm(a, weight=c),
            [x, cw], grad=[0, 1], rng=rng)
    compare(lambda a, c: F.rms_norm(a, 3, c), lambda a, c: torch.nn.functional.rms_norm(a, (3,), c),
            [x, w], grad=[0, 1], rng=rng)


def test_norm_shape_errors():
    with pytest.raises(ShapeError, match=r"does not end with normalized_shape \(5,\)"):
        nn.LayerNorm(5)(ember.zeros(2, 4))
    with pytest.raises(ShapeError, match="divisible"):
        nn.GroupNorm(3, 4)
    with pytest.raises(ShapeError, match=r"expected \(N, 4, \*\)"):
        nn.GroupNorm(2, 4)(ember.zeros(2, 6))
    with pytest.raises(ShapeError, match="spatial"):
        F.instance_norm(ember.zeros(2, 3))


def test_running_stats_are_buffers_that_round_trip(rng):
    bn = nn.BatchNorm1d(3)
    bn(ember.randn(5, 3))
    assert [n for n, _ in bn.named_buffers()] == ["running_mean", "running_var", "num_batches_tracked"]
    assert [n for n, _ in bn.named_parameters()] == ["weight", "bias"]
    fresh = nn.BatchNorm1d(3)
    assert fresh.load_state_dict(bn.state_dict()).ok
    for name, value in bn.state_dict().items():
        np.testing.assert_array_equal(fresh.state_dict()[name].numpy(), value.numpy())
    assert fresh.num_batches_tracked.dtype == ember.i64
    assert "BatchNorm1d(3, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True, params=6)" == repr(bn)


def test_frozen_norm_gets_no_parameter_gradients(rng):
    ln = nn.LayerNorm(3).to(DEVICE).freeze()
    x = to_ember(rng.standard_normal((2, 3)).astype(np.float32), True)
    grads = ln(x).sum().backward()
    assert x.grad(grads) is not None
    assert not ln.weight.requires_grad and not ln.bias.requires_grad


def test_batch_norm_on_autodiff_device_keeps_buffers_untracked(rng):
    bn = nn.BatchNorm1d(2).to(DEVICE)
    out = bn(to_ember(rng.standard_normal((4, 2)).astype(np.float32), True))
    out.sum().backward()
    assert not bn.running_mean.requires_grad and bn.running_mean.device == DEVICE
