"""`Module.apply`, forward hooks and `Module.to(device, dtype)` / `.float()`-style casts, each against
what PyTorch does with the same module."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
from ember import nn
from ember.errors import DeviceError, DTypeError


def _linear_pair(device, n_in: int = 5, n_out: int = 3):
    t = torch.nn.Linear(n_in, n_out)
    e = nn.Linear(n_in, n_out).to(device)
    e.weight.set(ember.tensor(t.weight.detach().numpy()))
    e.bias.set(ember.tensor(t.bias.detach().numpy()))
    return t, e


def _x(rows: int, cols: int = 5) -> np.ndarray:
    return np.random.default_rng(rows).standard_normal((rows, cols)).astype(np.float32)


def test_apply_visits_in_torch_order():
    def build(lib):
        return lib.Sequential(lib.Linear(2, 2), lib.Sequential(lib.ReLU(), lib.Linear(2, 1)), lib.Tanh())

    seen_e, seen_t = [], []
    out = build(nn).apply(lambda m: seen_e.append(type(m).__name__))
    build(torch.nn).apply(lambda m: seen_t.append(type(m).__name__))
    assert seen_e == seen_t and isinstance(out, nn.Sequential)


def test_apply_initialises_like_torch():
    e = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    t = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))

    def fill(lib, value):
        def init(m):
            if isinstance(m, lib.Linear):
                if lib is nn:
                    m.weight.set(ember.full(m.weight.shape, value))
                    m.bias.set(ember.zeros(*m.bias.shape))
                else:
                    torch.nn.init.constant_(m.weight, value), torch.nn.init.zeros_(m.bias)
        return init

    e.apply(fill(nn, 0.25)), t.apply(fill(torch.nn, 0.25))
    x = _x(4, 3)
    np.testing.assert_allclose(e(ember.tensor(x)).numpy(), t(torch.from_numpy(x)).detach().numpy(), rtol=1e-6)


@pytest.mark.parametrize("rows", [0, 1, 7])
def test_forward_hooks_replace_inputs_and_outputs_as_torch(device, rows):
    t, e = _linear_pair(device)
    calls_e, calls_t = [], []
    for module, calls, lib in ((e, calls_e, "e"), (t, calls_t, "t")):
        module.register_forward_pre_hook(lambda m, args, c=calls: c.append("pre1") or args[0] * 2)  # non-tuple
        module.register_forward_pre_hook(lambda m, args, c=calls: c.append("pre2") or (args[0] + 1,))
        module.register_forward_hook(lambda m, args, out, c=calls: c.append("post1"))  # None: keeps output
        module.register_forward_hook(lambda m, args, out, c=calls: c.append("post2") or out * args[0].sum())
    x = _x(rows)
    want = t(torch.from_numpy(x)).detach().numpy()
    got = e(ember.tensor(x, device=device)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert calls_e == calls_t == ["pre1", "pre2", "post1", "post2"]


def test_hook_handles_remove_and_scope(device):
    t, e = _linear_pair(device)
    x = ember.tensor(_x(2), device=device)
    plain = e(x).numpy()
    handle = e.register_forward_hook(lambda m, args, out: out * 0)
    assert float(e(x).abs().sum()) == 0
    handle.remove()
    handle.remove()  # a second remove is a no-op, as in torch
    np.testing.assert_array_equal(e(x).numpy(), plain)
    with e.register_forward_pre_hook(lambda m, args: (args[0] * 0,)):
        np.testing.assert_allclose(e(x).numpy(), np.broadcast_to(t.bias.detach().numpy(), (2, 3)), rtol=1e-6)
    np.testing.assert_array_equal(e(x).numpy(), plain)
    with pytest.raises(TypeError, match="must be callable"):
        e.register_forward_hook(3)


def test_hook_sees_every_layer_of_a_sequential_and_survives_copy():
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))
    shapes = []
    handles = [m.register_forward_hook(lambda m, args, out: shapes.append(out.shape)) for m in model]
    model(ember.ones(3, 4))
    assert shapes == [(3, 6), (3, 6), (3, 2)]
    twin = model.copy()
    for h in handles:
        h.remove()
    twin(ember.ones(1, 4))
    model(ember.ones(1, 4))
    assert shapes[3:] == [(1, 6), (1, 6), (1, 2)]  # the copy kept its hooks; the original lost them
    assert "_hooks" not in "".join(model.state_dict())


def _model(lib):
    return lib.Sequential(lib.Linear(4, 6), lib.BatchNorm1d(6), lib.Linear(6, 3))


def _dtypes(state) -> dict[str, str]:
    names = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
             torch.int64: "i64"}
    return {k: (names[v.dtype] if isinstance(v, torch.Tensor) else v.dtype.name) for k, v in state.items()}


@pytest.mark.parametrize("how", ["half", "bfloat16", "double", "float"])
def test_cast_methods_cast_float_state_as_torch(how):
    e, t = _model(nn), _model(torch.nn)
    assert getattr(e, how)() is e
    getattr(t, how)()
    assert _dtypes(e.state_dict()) == _dtypes(t.state_dict())  # num_batches_tracked stays i64


@pytest.mark.parametrize("spec", [ember.bfloat16, "bf16", "float16", torch.float64, ember.f32])
def test_to_dtype_forms(device, spec):
    want = ember.dtype.dtype_of(spec)
    for call in (lambda m: m.to(spec), lambda m: m.to(device, spec), lambda m: m.to(device=device, dtype=spec),
                 lambda m: m.to(dtype=spec)):
        m = _model(nn)
        assert call(m) is m
        assert {p.dtype for p in m.parameters()} == {want}
        assert m[1].running_var.dtype is want and m[1].num_batches_tracked.dtype is ember.i64
    m = _model(nn).to(device, spec)
    assert {p.device for p in m.parameters()} == {device}


def test_half_model_output_matches_torch_half(device):
    t, e = _linear_pair(device, 6, 4)
    t.half(), e.half()
    x = _x(3, 6)
    got = e(ember.tensor(x, device=device).half())
    assert got.dtype is ember.f16
    want = t(torch.from_numpy(x).half()).detach().float().numpy()
    np.testing.assert_allclose(got.float().numpy(), want, rtol=2e-3, atol=2e-3)


def test_to_moves_to_autodiff_and_keeps_params_trainable():
    m = _model(nn).to(ember.Device.cpu().autodiff(), "f64")
    assert all(p.requires_grad and p.dtype is ember.f64 for p in m.parameters())
    grads = m(ember.ones(2, 4, dtype="f64", device=ember.Device.cpu().autodiff())).sum().backward()
    assert m[0].weight.grad(grads).dtype is ember.f64


def test_to_errors_name_the_mistake():
    m = _model(nn)
    with pytest.raises(DeviceError, match="'bf17' is neither a device .* nor a dtype"):
        m.to("bf17")
    with pytest.raises(DeviceError, match="neither a device"):
        m.to(3.5)
    with pytest.raises(DTypeError, match="only to float dtypes.* got i64"):
        m.to("int64")
    with pytest.raises(TypeError, match="takes a device and a dtype"):
        m.to("cpu", "f32", "f16")
    with pytest.raises(DeviceError, match="neither a device"):
        ember.ones(2).to("gpu")
