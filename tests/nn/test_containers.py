"""Containers (Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict) against PyTorch's:
the same structure gives the same state-dict names, a torch checkpoint loads through ember's store and
gives the same outputs on random inputs, and an ember checkpoint loads into torch the same way."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import torch

import ember
from ember import nn
from ember.store import load_module, save_module


class TorchNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(OrderedDict(fc=torch.nn.Linear(5, 7), act=torch.nn.Tanh()))
        self.layers = torch.nn.ModuleList([torch.nn.Linear(7, 7), torch.nn.BatchNorm1d(7), torch.nn.ReLU(),
                                           torch.nn.Sequential(torch.nn.LayerNorm(7), torch.nn.Linear(7, 3))])
        self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(3, 2), "b": torch.nn.Linear(3, 1, bias=False)})
        self.scales = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(2)), torch.nn.Parameter(torch.randn(1))])
        self.gains = torch.nn.ParameterDict({"g": torch.nn.Parameter(torch.randn(3))})

    def forward(self, x):
        h = self.stem(x)
        for layer in self.layers:
            h = layer(h)
        h = h * self.gains["g"]
        return torch.cat([self.heads["a"](h) * self.scales[0], self.heads["b"](h) * self.scales[1]], -1)


class EmberNet(nn.Module):
    def __init__(self) -> None:
        self.stem = nn.Sequential(OrderedDict(fc=nn.Linear(5, 7), act=nn.Tanh()))
        self.layers = nn.ModuleList([nn.Linear(7, 7), nn.BatchNorm1d(7), nn.ReLU(),
                                     nn.Sequential(nn.LayerNorm(7), nn.Linear(7, 3))])
        self.heads = nn.ModuleDict({"a": nn.Linear(3, 2), "b": nn.Linear(3, 1, bias=False)})
        self.scales = nn.ParameterList([ember.randn(2), ember.randn(1)])
        self.gains = nn.ParameterDict({"g": ember.randn(3)})

    def forward(self, x):
        h = self.stem(x)
        for layer in self.layers:
            h = layer(h)
        h = h * self.gains["g"]
        return ember.cat([self.heads["a"](h) * self.scales[0], self.heads["b"](h) * self.scales[1]], -1)


def _torch_net() -> TorchNet:
    net = TorchNet()
    bn = net.layers[1]
    with torch.no_grad():  # running statistics that are not the defaults, so loading them matters
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2.0)
        bn.num_batches_tracked.fill_(3)
    return net.eval()


def test_state_dict_names_match_torch():
    assert set(EmberNet().state_dict()) == set(_torch_net().state_dict())
    assert sorted(EmberNet().state_dict()) == sorted(_torch_net().state_dict())


@pytest.mark.parametrize("batch", [1, 6])
@pytest.mark.parametrize("ext", ["pt", "safetensors"])
def test_torch_checkpoint_loads_and_gives_torch_outputs(tmp_path, device, batch, ext):
    torch_net = _torch_net()
    path = tmp_path / f"net.{ext}"
    if ext == "pt":
        torch.save(torch_net.state_dict(), path)
    else:
        from safetensors.torch import save_file
        save_file(dict(torch_net.state_dict()), path)
    net = EmberNet().to(device).eval()
    assert load_module(net, path).ok
    x = np.random.default_rng(batch).standard_normal((batch, 5)).astype(np.float32)
    want = torch_net(torch.from_numpy(x)).detach().numpy()
    got = net(ember.tensor(x, device=device)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("ext", ["pt", "safetensors"])
def test_ember_checkpoint_loads_into_torch(tmp_path, ext):
    net = EmberNet().eval()
    net.layers[1].running_mean = ember.randn(7)
    path = tmp_path / f"net.{ext}"
    save_module(net, path)
    if ext == "pt":
        state = torch.load(path, weights_only=True)
    else:
        from safetensors.torch import load_file
        state = load_file(path)
    torch_net = TorchNet().eval()
    torch_net.load_state_dict(state, strict=True)
    x = np.random.default_rng(1).standard_normal((5, 5)).astype(np.float32)
    np.testing.assert_allclose(net(ember.tensor(x)).numpy(), torch_net(torch.from_numpy(x)).detach().numpy(),
                               rtol=1e-4, atol=1e-5)


def _pair(n: int = 4):
    """A torch Sequential of `n` Linear layers and an ember one holding the same weights."""
    t = torch.nn.Sequential(*[torch.nn.Linear(3, 3) for _ in range(n)])
    e = nn.Sequential(*[nn.Linear(3, 3) for _ in range(n)])
    assert e.load_state_dict({k: ember.tensor(v.detach().numpy()) for k, v in t.state_dict().items()}).ok
    return t, e


def _names(module) -> list[str]:
    return sorted(module.state_dict())


def test_sequential_indexing_slicing_and_editing_follow_torch():
    t, e = _pair(5)
    assert len(e) == len(t) == 5
    for i in (0, 3, -1, -5):
        np.testing.assert_array_equal(e[i].weight.numpy(), t[i].weight.detach().numpy())
    for s in (slice(1, 4), slice(None, None, 2), slice(-2, None), slice(3, 3)):
        assert isinstance(e[s], nn.Sequential) and len(e[s]) == len(t[s])
        assert _names(e[s]) == _names(t[s])
    assert [m.weight.shape for m in e] == [tuple(m.weight.shape) for m in t]
    with pytest.raises(IndexError, match="out of range"):
        e[5]
    del e[1], t[1]
    del e[::2], t[::2]
    assert _names(e) == _names(t)
    e.insert(1, nn.Linear(3, 3)), t.insert(1, torch.nn.Linear(3, 3))
    e.append(nn.Tanh()), t.append(torch.nn.Tanh())
    e[0], t[0] = nn.Linear(3, 3), torch.nn.Linear(3, 3)
    assert _names(e) == _names(t) and len(e) == len(t)
    with pytest.raises(TypeError, match="holds Modules"):
        e.append(ember.ones(2))


def test_sequential_forward_matches_torch_on_odd_and_empty_batches(device):
    t, e = _pair(3)
    e.to(device)
    for rows in (0, 1, 7):
        x = np.random.default_rng(rows).standard_normal((rows, 3)).astype(np.float32)
        np.testing.assert_allclose(e(ember.tensor(x, device=device)).numpy(),
                                   t(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
    assert nn.Sequential()(ember.ones(2)).tolist() == [1.0, 1.0]  # empty: identity, as in torch


def test_sequential_from_ordered_dict_keeps_names_through_slices():
    e = nn.Sequential(OrderedDict(fc=nn.Linear(2, 3), act=nn.ReLU(), out=nn.Linear(3, 1)))
    t = torch.nn.Sequential(OrderedDict(fc=torch.nn.Linear(2, 3), act=torch.nn.ReLU(), out=torch.nn.Linear(3, 1)))
    assert e.fc is e[0] and e.out is e[-1]
    assert list(e[1:].state_dict()) == list(t[1:].state_dict()) == ["out.weight", "out.bias"]
    e.append(nn.Tanh())
    assert isinstance(e[3], nn.Tanh) and list(e.state_dict())[-2:] == ["out.weight", "out.bias"]


def test_module_list_matches_torch():
    e = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    t = torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(3)])
    e += [nn.Linear(2, 1)]
    t += [torch.nn.Linear(2, 1)]
    e.extend([nn.Linear(1, 1)]), t.extend([torch.nn.Linear(1, 1)])
    assert _names(e) == _names(t) and len(e) == len(t) == 5
    assert _names(e[1:3]) == _names(t[1:3])
    del e[0], t[0]
    assert _names(e) == _names(t)
    assert nn.ModuleList().num_params() == 0 and len(nn.ModuleList()) == 0


def test_module_dict_matches_torch():
    e = nn.ModuleDict({"enc": nn.Linear(2, 3), "dec": nn.Linear(3, 2)})
    t = torch.nn.ModuleDict({"enc": torch.nn.Linear(2, 3), "dec": torch.nn.Linear(3, 2)})
    e["head"], t["head"] = nn.Linear(2, 1), torch.nn.Linear(2, 1)
    e.update([("x", nn.ReLU())]), t.update([("x", torch.nn.ReLU())])
    assert list(e) == list(t) == list(e.keys()) == ["enc", "dec", "head", "x"]
    assert list(e.state_dict()) == [k for k in t.state_dict()]
    assert "enc" in e and "nope" not in e and [k for k, _ in e.items()] == list(t.keys())
    assert e.pop("dec") is not None and t.pop("dec") is not None
    del e["x"], t["x"]
    assert _names(e) == _names(t)
    with pytest.raises(KeyError, match="no key 'missing'"):
        e["missing"]
    for bad in ("items", "a.b", "", "_x", "training", "forward"):
        with pytest.raises(KeyError, match="cannot name an item"):
            e[bad] = nn.ReLU()
    e.clear()
    assert len(e) == 0 and e.state_dict() == {}


def test_parameter_containers_match_torch_and_train():
    rng = np.random.default_rng(0)
    values = [rng.standard_normal(s).astype(np.float32) for s in ((3,), (2, 5), (0,))]
    e = nn.ParameterList([ember.tensor(v) for v in values])
    t = torch.nn.ParameterList([torch.nn.Parameter(torch.from_numpy(v)) for v in values])
    assert list(e.state_dict()) == list(t.state_dict()) == ["0", "1", "2"]
    assert all(isinstance(p, nn.Param) for p in e) and e.num_params() == 13
    d = nn.ParameterDict({"a": ember.ones(2), "b": nn.Param(ember.zeros(1))})
    assert list(d.state_dict()) == list(torch.nn.ParameterDict(
        {"a": torch.nn.Parameter(torch.ones(2)), "b": torch.nn.Parameter(torch.zeros(1))}).state_dict())
    with pytest.raises(TypeError, match="holds Params"):
        e.append(3.0)
    # the optimizer sees and updates them like any other parameters
    e.to(ember.Device.cpu().autodiff())
    opt = ember.optim.SGD(e, lr=0.5)
    grads = (e[0].sum() + (e[1] * e[1]).sum()).backward()
    opt.step(grads)
    np.testing.assert_allclose(e[0].numpy(), values[0] - 0.5, rtol=1e-6)
    np.testing.assert_allclose(e[1].numpy(), values[1] * 0.0, atol=1e-6)


def test_containers_copy_and_move_independently(device):
    e = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)).to(ember.Device.numpy())
    twin = e.copy().to(device)
    twin.append(nn.ReLU())
    twin[0].weight.set(ember.zeros(2, 2))
    assert len(e) == 2 and len(twin) == 3
    assert twin[0].weight.device == twin[1].running_mean.device == device
    assert e[0].weight.device == e[1].running_mean.device == ember.Device.numpy()
    assert float(e[0].weight.abs().sum()) > 0
