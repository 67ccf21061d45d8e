"""`ember.nn.Module` (structure walk, buffers, devices, modes, freezing, map/visit, copies, state dicts,
repr) and `ember.Config` (defaults, validation naming the field, JSON save/load, unknown keys)."""

from __future__ import annotations

import json
from collections import namedtuple
from typing import Literal, Optional

import numpy as np
import pytest

import ember
from ember import Config
from ember.errors import ConfigError, ShapeError
from ember.nn import Linear, LoadReport, Module, Param, ParamGroup

AUTODIFF = ember.Device.cpu().autodiff()


class Block(Module):
    def __init__(self, n: int = 3):
        self.proj = Linear(n, n)
        self.scale = Param(ember.ones(n))
        self.running = ember.zeros(n)  # a buffer: a tensor that is not a Param

    def forward(self, x):
        return self.proj(x) * self.scale + self.running


class Net(Module):
    def __init__(self):
        self.stem = Linear(2, 3)
        self.blocks = [Block(), Block()]
        self.heads = {"a": Linear(3, 1), "b": Linear(3, 2, bias=False)}
        self.pair = (ember.ones(1), Param(ember.zeros(2)))
        self.note = "not part of the structure"
        self._private = Param(ember.ones(1))  # underscore: ignored by the walk

    def forward(self, x):
        h = self.stem(x)
        for block in self.blocks:
            h = block(h)
        return self.heads["a"](h)


PARAM_NAMES = ["stem.weight", "stem.bias",
               "blocks.0.proj.weight", "blocks.0.proj.bias", "blocks.0.scale",
               "blocks.1.proj.weight", "blocks.1.proj.bias", "blocks.1.scale",
               "heads.a.weight", "heads.a.bias", "heads.b.weight", "pair.1"]
BUFFER_NAMES = ["blocks.0.running", "blocks.1.running", "pair.0"]


def test_named_parameters_follow_definition_order_through_containers():
    net = Net()
    assert [n for n, _ in net.named_parameters()] == PARAM_NAMES
    assert [n for n, _ in net.named_buffers()] == BUFFER_NAMES
    assert net.parameters()[0] is net.stem.weight
    assert [n for n, _ in net.named_modules()] == ["", "stem", "blocks.0", "blocks.0.proj", "blocks.1",
                                                   "blocks.1.proj", "heads.a", "heads.b"]
    assert [type(c).__name__ for c in net.children()] == ["Linear", "Block", "Block", "Linear", "Linear"]
    assert net.num_params() == 9 + 2 * (12 + 3) + 4 + 6 + 2
    assert [n for n, _ in net.named_parameters(prefix="model.")][0] == "model.stem.weight"


def test_shared_parameter_is_listed_and_counted_once_but_saved_under_both_names():
    class Tied(Module):
        def __init__(self):
            self.encoder = Linear(4, 4)
            self.decoder = Linear(4, 4)
            self.decoder.weight = self.encoder.weight

    tied = Tied()
    assert [n for n, _ in tied.named_parameters()] == ["encoder.weight", "encoder.bias", "decoder.bias"]
    assert tied.num_params() == 16 + 4 + 4
    assert list(tied.state_dict()) == ["encoder.weight", "encoder.bias", "decoder.weight", "decoder.bias"]
    halved = tied.copy().map(lambda name, p: p * 0.5)  # map touches the shared weight once
    np.testing.assert_allclose(halved.decoder.weight.numpy(), tied.encoder.weight.numpy() * 0.5)
    assert halved.encoder.weight is halved.decoder.weight
    assert Tied().load_state_dict(tied.state_dict()).ok


def test_to_autodiff_device_moves_params_and_buffers_and_keeps_objects():
    net = Net()
    weight, blocks, heads = net.stem.weight, net.blocks, net.heads
    assert net.to(AUTODIFF) is net
    assert net.stem.weight is weight and net.blocks is blocks and net.heads is heads
    for _, p in net.named_parameters():
        assert p.device == AUTODIFF and p.requires_grad
    for _, b in net.named_buffers():
        assert b.device == AUTODIFF and not b.requires_grad
    assert isinstance(net.pair, tuple) and net.pair[1].device == AUTODIFF
    grads = net(ember.ones(4, 2)).sum().backward()
    assert net.blocks[1].scale.grad(grads).shape == (3,)
    net.to("numpy")
    assert net.stem.weight.device == ember.Device.numpy() and not net.stem.weight.requires_grad
    assert net.blocks[0].running.device == ember.Device.numpy()


def test_to_keeps_named_tuples():
    Stats = namedtuple("Stats", "mean var")

    class M(Module):
        def __init__(self):
            self.stats = Stats(ember.zeros(2), ember.ones(2))

    m = M().to(AUTODIFF)
    assert isinstance(m.stats, Stats) and m.stats.var.device == AUTODIFF


def test_train_and_eval_reach_every_module():
    net = Net()
    assert net.training and net.blocks[1].proj.training
    assert net.eval() is net
    assert not any(m.training for _, m in net.named_modules())
    net.blocks[0].train()
    assert net.blocks[0].training and net.blocks[0].proj.training and not net.training
    net.train()
    assert all(m.training for _, m in net.named_modules())


def test_freeze_and_unfreeze_whole_module():
    net = Net().to(AUTODIFF)
    net.freeze()
    assert all(p.frozen and not p.requires_grad for p in net.parameters())
    assert net.num_params(trainable_only=True) == 0
    net.unfreeze()
    assert all(not p.frozen and p.requires_grad for p in net.parameters())
    assert net.num_params(trainable_only=True) == net.num_params()


@pytest.mark.parametrize("group, frozen", [
    (ParamGroup(prefix="blocks."), [n for n in PARAM_NAMES if n.startswith("blocks.")]),
    (ParamGroup(regex=r"\.bias$"), [n for n in PARAM_NAMES if n.endswith(".bias")]),
    (ParamGroup(predicate=lambda name, p: p.ndim == 2), [n for n in PARAM_NAMES if n.endswith("weight")]),
])
def test_freeze_by_group(group, frozen):
    net = Net().to(AUTODIFF).freeze(group)
    assert [n for n, p in net.named_parameters() if p.frozen] == frozen
    assert all(p.requires_grad != p.frozen for p in net.parameters())
    grads = net(ember.ones(2, 2)).sum().backward()
    for name, p in net.named_parameters():
        if p.frozen:
            with pytest.raises(ValueError, match="not tracked"):
                p.grad(grads)
    net.unfreeze(group)
    assert not any(p.frozen for p in net.parameters())


def test_param_group_needs_exactly_one_selector_and_keeps_options():
    with pytest.raises(ValueError, match="exactly one"):
        ParamGroup()
    with pytest.raises(ValueError, match="exactly one"):
        ParamGroup(prefix="a", regex="b")
    group = ParamGroup(prefix="head.", lr=0.1)
    assert group.options == {"lr": 0.1} and repr(group) == "ParamGroup(prefix='head.', lr=0.1)"


def test_frozen_parameter_stays_frozen_when_moved():
    net = Net().freeze(ParamGroup(prefix="stem.")).to(AUTODIFF)
    assert not net.stem.weight.requires_grad and net.heads["a"].weight.requires_grad


def test_map_and_visit():
    net = Net()
    before = {n: p.numpy().copy() for n, p in net.named_parameters()}
    ids = {n: id(p) for n, p in net.named_parameters()}
    assert net.map(lambda name, p: p * 2 + (1 if name == "stem.bias" else 0)) is net
    for name, p in net.named_parameters():
        assert id(p) == ids[name]
        np.testing.assert_allclose(p.numpy(), before[name] * 2 + (name == "stem.bias"), rtol=1e-6)
    seen = []
    net.visit(lambda name, p: seen.append((name, p.shape)))
    assert [n for n, _ in seen] == PARAM_NAMES and seen[0][1] == (3, 2)
    with pytest.raises(ShapeError, match=r"new value of shape \(2,\) for a parameter of shape \(3, 2\)"):
        net.map(lambda name, p: ember.zeros(2))


def test_map_on_autodiff_device_keeps_leaves():
    net = Net().to(AUTODIFF)
    net.map(lambda name, p: p.inner() * 0.5)
    assert all(p.requires_grad and p.device == AUTODIFF for p in net.parameters())


def test_copy_is_independent():
    net = Net()
    twin = net.copy()
    assert twin.stem.weight is not net.stem.weight
    np.testing.assert_array_equal(twin.stem.weight.numpy(), net.stem.weight.numpy())
    twin.stem.weight.set(ember.zeros(3, 2))
    twin.blocks.append(Block())
    twin.blocks[0].running = ember.ones(3)
    twin.eval()
    assert float(net.stem.weight.abs().sum()) > 0
    assert len(net.blocks) == 2 and float(net.blocks[0].running.sum()) == 0 and net.training


def test_state_dict_round_trip():
    net = Net()
    state = net.state_dict()
    assert list(state) == PARAM_NAMES + BUFFER_NAMES
    assert not any(isinstance(v, Param) for v in state.values())
    other = Net()
    other.blocks[1].running = ember.full((3,), 7.0)
    report = other.load_state_dict(state)
    assert report == LoadReport([], [], []) and report.ok
    for name, value in other.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), state[name].numpy(), err_msg=name)


def test_load_state_dict_casts_moves_and_accepts_arrays():
    net = Net().to(AUTODIFF)
    state = {k: np.asarray(v.numpy(), np.float64) + 1 for k, v in Net().state_dict().items()}
    assert net.load_state_dict(state).ok
    assert net.stem.weight.dtype == ember.f32 and net.stem.weight.device == AUTODIFF
    assert net.stem.weight.requires_grad
    np.testing.assert_allclose(net.stem.weight.numpy(), state["stem.weight"], rtol=1e-6)
    assert net.pair[0].device == AUTODIFF and float(net.pair[0].item()) == 2.0


def test_loaded_buffers_carry_no_gradient_history():
    net = Net().to(AUTODIFF)
    state = dict(net.state_dict())
    tracked = ember.ones(3, device=AUTODIFF).require_grad()
    state["blocks.0.running"] = tracked * 2
    assert net.load_state_dict(state).ok
    assert not net.blocks[0].running.requires_grad and net.blocks[0].running.tolist() == [2.0] * 3


def test_load_state_dict_strict_reports_everything_and_loads_nothing():
    net = Net()
    before = net.stem.bias.numpy().copy()
    state = dict(Net().state_dict())
    del state["heads.a.bias"]
    state["extra.weight"] = ember.zeros(1)
    with pytest.raises(KeyError, match=r"missing keys \['heads.a.bias'\].*unexpected keys \['extra.weight'\]"):
        net.load_state_dict(state)
    state["heads.a.bias"] = ember.zeros(1)
    state["stem.weight"] = ember.zeros(2, 3)
    with pytest.raises(ShapeError, match=r"stem.weight: expected \(3, 2\), found \(2, 3\)"):
        net.load_state_dict(state)
    np.testing.assert_array_equal(net.stem.bias.numpy(), before)


def test_load_state_dict_non_strict_loads_what_fits():
    net = Net()
    state = dict(Net().state_dict())
    del state["heads.b.weight"]
    state["stem.weight"] = ember.zeros(2, 3)
    state["ghost"] = ember.zeros(1)
    report = net.load_state_dict(state, strict=False)
    assert report.missing == ["heads.b.weight"] and report.unexpected == ["ghost"]
    assert report.mismatched == [("stem.weight", (3, 2), (2, 3))] and not report.ok
    np.testing.assert_array_equal(net.stem.bias.numpy(), state["stem.bias"].numpy())
    assert float(net.stem.weight.abs().sum()) > 0  # the mismatched key was skipped


def test_buffers_in_tuples_and_int_keyed_dicts_load():
    class M(Module):
        def __init__(self):
            self.stats = (ember.zeros(2), ember.zeros(2))
            self.by_id = {0: ember.zeros(1)}

    m = M()
    assert list(m.state_dict()) == ["stats.0", "stats.1", "by_id.0"]
    assert m.load_state_dict({"stats.0": ember.ones(2), "stats.1": ember.full((2,), 2.0),
                              "by_id.0": ember.ones(1)}).ok
    assert m.stats[1].tolist() == [2.0, 2.0] and m.by_id[0].tolist() == [1.0]


def test_repr_shows_tree_settings_and_counts():
    lines = repr(Net()).splitlines()
    assert lines[0] == f"Net(params={Net().num_params():,})"
    assert lines[1] == "  (stem): Linear(in=2, out=3, bias=True, params=9)"
    assert lines[2] == "  (blocks.0): Block(params=15)"
    assert lines[3] == "    (proj): Linear(in=3, out=3, bias=True, params=12)"
    assert lines[-1] == "  (heads.b): Linear(in=3, out=2, bias=False, params=6)"
    big = Linear(1000, 1000)
    assert repr(big) == "Linear(in=1000, out=1000, bias=True, params=1,001,000)"


def test_forward_must_be_defined():
    class Empty(Module):
        pass

    with pytest.raises(NotImplementedError, match="Empty defines no forward"):
        Empty()(1)


def test_param_wraps_tensors_only():
    with pytest.raises(TypeError, match="Param wraps a tensor"):
        Param(np.zeros(2))
    p = Param(ember.zeros(2), frozen=True)
    assert "frozen" in repr(p) and p.value.__class__ is ember.Tensor


# ---- Config ----------------------------------------------------------------------------------------

class OptimConfig(Config):
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)


class ModelConfig(Config):
    hidden: int
    layers: list[int] = (64, 32)
    dropout: float = 0.1
    activation: Literal["relu", "gelu"] = "relu"
    name: Optional[str] = None
    optim: Optional[OptimConfig] = None
    tags: Optional[dict[str, int]] = None
    use_bias: bool = True


def test_config_defaults_and_coercion():
    c = ModelConfig(hidden=8, dropout=0)
    assert c.layers == [64, 32] and c.dropout == 0.0 and isinstance(c.dropout, float)
    assert c.activation == "relu" and c.name is None and c.use_bias is True
    assert OptimConfig().betas == (0.9, 0.999)


@pytest.mark.parametrize("kwargs, message", [
    ({"hidden": "8"}, "ModelConfig.hidden: expected an int, got '8'"),
    ({"hidden": True}, "ModelConfig.hidden: expected an int, got True"),
    ({"hidden": 8, "dropout": "high"}, "ModelConfig.dropout: expected a float"),
    ({"hidden": 8, "layers": [1, "x"]}, "ModelConfig.layers: expected an int, got 'x'"),
    ({"hidden": 8, "layers": 3}, "ModelConfig.layers: expected a list"),
    ({"hidden": 8, "activation": "tanh"}, "ModelConfig.activation: expected one of \\['relu', 'gelu'\\]"),
    ({"hidden": 8, "name": 3}, "ModelConfig.name: expected"),
    ({"hidden": 8, "tags": {"a": 1.5}}, "ModelConfig.tags: expected an int, got 1.5"),
    ({"hidden": 8, "use_bias": 1}, "ModelConfig.use_bias: expected bool"),
    ({"hidden": 8, "optim": 5}, "ModelConfig.optim: expected a OptimConfig or a dict"),
])
def test_config_validation_names_the_field(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        ModelConfig(**kwargs)


def test_config_fixed_length_tuple():
    with pytest.raises(ConfigError, match="OptimConfig.betas: expected 2 items"):
        OptimConfig(betas=(0.9,))
    with pytest.raises(ConfigError, match="OptimConfig.betas: expected a float, got 'x'"):
        OptimConfig(betas=(0.9, "x"))


def test_config_json_round_trip(tmp_path):
    c = ModelConfig(hidden=16, layers=[8], activation="gelu", name="m", optim=OptimConfig(lr=0.5),
                    tags={"a": 1})
    path = tmp_path / "model.json"
    c.save(path)
    data = json.loads(path.read_text())
    assert data["optim"] == {"lr": 0.5, "betas": [0.9, 0.999]} and data["hidden"] == 16
    loaded = ModelConfig.load(path)
    assert loaded == c and isinstance(loaded.optim, OptimConfig) and loaded.optim.betas == (0.9, 0.999)
    assert [p.name for p in tmp_path.iterdir()] == ["model.json"]  # no temporary file left behind


def test_config_from_dict_unknown_missing_and_nested(tmp_path):
    with pytest.raises(ConfigError, match=r"ModelConfig: unknown field\(s\) \['hiden'\]; known: .*'hidden'"):
        ModelConfig.from_dict({"hiden": 3})
    with pytest.raises(ConfigError, match=r"missing required field\(s\) \['hidden'\]"):
        ModelConfig.from_dict({})
    with pytest.raises(ConfigError, match=r"OptimConfig: unknown field\(s\) \['momentum'\]"):
        ModelConfig.from_dict({"hidden": 1, "optim": {"momentum": 0.9}})
    with pytest.raises(ConfigError, match="expected a JSON object"):
        ModelConfig.from_dict([1])
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="bad.json: not valid JSON"):
        ModelConfig.load(bad)
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"hidden": "big"}')
    with pytest.raises(ConfigError, match="wrong.json: ModelConfig.hidden: expected an int"):
        ModelConfig.load(wrong)


def test_config_subclass_inherits_fields():
    class Bigger(ModelConfig):
        extra: int = 1

    b = Bigger(hidden=2)
    assert b.extra == 1 and b.to_dict()["hidden"] == 2
    with pytest.raises(ConfigError, match="Bigger.extra"):
        Bigger(hidden=2, extra=1.5)
