"""LoRA (ember/lora/): layers against the formula and against `peft` with the same A and B, merging,
adapters' switching, freezing and optimizer groups, and PEFT's adapter files both ways with `peft`."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import ember
from ember import store
from ember.errors import ShapeError, StoreError
from ember.lora import (LoraConfig, active_adapters, adapter_group, adapter_names, apply_lora, delete_adapter,
                        disable_adapters, load_adapter, merge_lora, save_adapter, set_adapter,
                        trainable_parameters, unmerge_lora)
from ember.models import LlamaForCausalLM
from ember.nn import Conv2d, Embedding, LayerNorm, Linear, Module, ParamGroup
from ember.nn.loss import cross_entropy
from ember.optim import AdamW

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")


class Net(Module):
    """An embedding, a linear layer, a convolution and a head: every kind LoRA adapts."""

    def __init__(self, device=None) -> None:
        self.emb = Embedding(13, 6, device=device)
        self.proj = Linear(6, 5, device=device)
        self.conv = Conv2d(2, 3, 3, stride=2, padding=1, device=device)
        self.head = Linear(5, 3, device=device)

    def forward(self, ids, image):
        return self.head(self.proj(self.emb(ids))), self.conv(image)


class TorchNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(13, 6)
        self.proj = torch.nn.Linear(6, 5)
        self.conv = torch.nn.Conv2d(2, 3, 3, stride=2, padding=1)
        self.head = torch.nn.Linear(5, 3)

    def forward(self, ids, image):
        return self.head(self.proj(self.emb(ids))), self.conv(image)


IDS = np.array([[1, 4, 12], [0, 7, 3]])
IMAGE = np.random.default_rng(0).standard_normal((2, 2, 7, 5)).astype(np.float32)
TARGETS = ["emb", "proj", "conv"]


def run(model) -> list[np.ndarray]:
    return [y.numpy() for y in model(ember.tensor(IDS), ember.tensor(IMAGE))]


def conv2d(x, w, stride=1, padding=0):
    return torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), stride=stride, padding=padding).numpy()


@pytest.mark.parametrize("rslora", [False, True])
def test_layers_add_the_scaled_low_rank_update_of_the_formula(rslora):
    model = Net()
    base = run(model)
    w = {n: p.numpy() for n, p in model.named_parameters()}
    apply_lora(model, LoraConfig(rank=3, alpha=5, targets=TARGETS, init="random", rslora=rslora))
    s = 5 / (math.sqrt(3) if rslora else 3)
    a = {n: p.numpy() for n, p in model.named_parameters() if "lora" in n}
    emb = w["emb.weight"][IDS] + s * a["emb.lora_embedding_A.default"].T[IDS] @ a["emb.lora_embedding_B.default"].T
    proj = emb @ w["proj.weight"].T + w["proj.bias"] + \
        s * emb @ a["proj.lora_A.default.weight"].T @ a["proj.lora_B.default.weight"].T
    head = proj @ w["head.weight"].T + w["head.bias"]
    conv = base[1] + s * conv2d(conv2d(IMAGE, a["conv.lora_A.default.weight"], 2, 1), a["conv.lora_B.default.weight"])
    out = run(model)
    np.testing.assert_allclose(out[0], head, atol=1e-5)
    np.testing.assert_allclose(out[1], conv, atol=1e-5)
    assert not np.allclose(out[0], base[0])
    with disable_adapters(model):
        np.testing.assert_array_equal(run(model)[0], base[0])
    np.testing.assert_array_equal(run(model)[0], out[0])


@pytest.mark.parametrize("init", ["kaiming", "gaussian"])
def test_default_inits_start_as_the_base_model(init):
    model = Net()
    base = run(model)
    apply_lora(model, LoraConfig(rank=2, targets=TARGETS, init=init))
    for ours, theirs in zip(run(model), base):
        np.testing.assert_array_equal(ours, theirs)
    a = model.proj.lora_A["default"].weight.numpy()
    bound = 1 / math.sqrt(6) if init == "kaiming" else 5 / 2  # U(+-1/sqrt(in)); N(0, 1/r) within 5 sigma
    assert 0 < np.abs(a).max() <= bound


def test_outputs_match_peft_with_the_same_weights():
    theirs = TorchNet()
    model = Net()
    config = peft.LoraConfig(r=4, lora_alpha=6, target_modules=TARGETS, init_lora_weights=False)
    wrapped = peft.get_peft_model(theirs, config).eval()
    apply_lora(model, LoraConfig(rank=4, alpha=6, targets=TARGETS))
    state = {k.removeprefix("base_model.model.").replace(".base_layer", ""): v.detach().numpy()
             for k, v in wrapped.state_dict().items()}
    model.load_state_dict(state)
    with torch.no_grad():
        expected = [y.numpy() for y in wrapped(torch.tensor(IDS), torch.tensor(IMAGE))]
    for ours, reference in zip(run(model), expected):
        np.testing.assert_allclose(ours, reference, atol=1e-5)


def test_merge_then_unmerge_restores_the_base_bitwise():
    model = Net()
    apply_lora(model, LoraConfig(rank=2, alpha=3, targets=TARGETS, init="random"))
    before = {n: p.numpy().copy() for n, p in model.named_parameters()}
    unmerged = run(model)
    merge_lora(model)
    assert not np.array_equal(model.proj.weight.numpy(), before["proj.weight"])
    for ours, reference in zip(run(model), unmerged):  # merged: the same function, up to rounding
        np.testing.assert_allclose(ours, reference, atol=1e-5)
    with pytest.raises(ValueError, match="unmerge_lora"):
        set_adapter(model, "default")
    unmerge_lora(model)
    for n, p in model.named_parameters():
        np.testing.assert_array_equal(p.numpy(), before[n], err_msg=n)
    for ours, reference in zip(run(model), unmerged):
        np.testing.assert_array_equal(ours, reference)


def test_named_adapters_switch_and_train_alone():
    model = Net()
    base = run(model)[0]
    apply_lora(model, LoraConfig(rank=2, targets=["proj"], init="random"), name="one")
    one = run(model)[0]
    apply_lora(model, LoraConfig(rank=3, targets=["proj", "conv"], init="random", bias="lora_only"), name="two")
    assert adapter_names(model) == ["one", "two"] and active_adapters(model) == ["two"]
    trainable = sorted(n for n, p in model.named_parameters() if not p.frozen)
    assert trainable == ["conv.bias", "conv.lora_A.two.weight", "conv.lora_B.two.weight", "proj.bias",
                         "proj.lora_A.two.weight", "proj.lora_B.two.weight"]
    two = run(model)[0]
    set_adapter(model, "one")
    np.testing.assert_array_equal(run(model)[0], one)
    set_adapter(model, ["one", "two"])  # both on proj: their updates add up (the head is linear)
    np.testing.assert_allclose(run(model)[0] - base, (one - base) + (two - base), atol=1e-5)
    delete_adapter(model, "two")
    assert adapter_names(model) == ["one"] and "conv.lora_A.two.weight" not in dict(model.named_parameters())
    with pytest.raises(ValueError, match="no adapter"):
        set_adapter(model, "two")
    with pytest.raises(ValueError, match="select no layer"):
        apply_lora(model, LoraConfig(targets=["nothing"]), name="three")
    model.norm = LayerNorm(5)
    with pytest.raises(TypeError, match="target norm is a LayerNorm"):
        apply_lora(model, LoraConfig(targets=["norm"]), name="three")


def test_frozen_parameters_get_no_gradient_and_no_optimizer_state():
    device = ember.Device.numpy().autodiff()
    model = Net(device)
    apply_lora(model, LoraConfig(rank=2, targets=ParamGroup(regex=r"^(emb|proj)\.weight$")))
    model.unfreeze(ParamGroup(prefix="head."))
    report = trainable_parameters(model)
    assert report.trainable == 2 * 13 + 2 * 6 + 2 * 6 + 2 * 5 + 5 * 3 + 3
    assert str(report) == f"trainable params: {report.trainable:,} || all params: {model.num_params():,} || " \
                          f"trainable%: {100 * report.trainable / model.num_params():.4f}"
    frozen = {n: p.numpy().copy() for n, p in model.named_parameters() if p.frozen}
    assert set(frozen) == {"emb.weight", "proj.weight", "proj.bias", "conv.weight", "conv.bias"}
    opt = AdamW(model, lr=0.05, groups=[adapter_group(lr=0.1, weight_decay=0.0),
                                         ParamGroup(prefix="head.", lr=0.01)])
    ids, labels = ember.tensor(IDS, device=device), ember.tensor([[0, 1, 2], [2, 1, 0]], device=device)
    losses = []
    for _ in range(8):
        loss = cross_entropy(model(ids, ember.tensor(IMAGE, device=device))[0].reshape(-1, 3), labels.reshape(-1))
        grads = loss.backward()
        assert all(not p.requires_grad for n, p in model.named_parameters() if n in frozen)
        opt.step(grads)
        losses.append(float(loss.numpy()))
    assert losses[-1] < losses[0]
    assert set(opt.state) == {n for n, p in model.named_parameters() if not p.frozen}
    for n, p in model.named_parameters():
        if n in frozen:
            np.testing.assert_array_equal(p.numpy(), frozen[n], err_msg=n)
    lrs = {e.name: e.group_lr for e in opt._entries}
    assert lrs["proj.lora_A.default.weight"] == 0.1 and lrs["head.weight"] == 0.01


# ---- PEFT files, both ways, on a tiny transformers Llama ------------------------------------------------------

def tiny_llama(path, hidden=32):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=53, hidden_size=hidden, intermediate_size=40, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16)
    model = transformers.LlamaForCausalLM(config).eval()
    model.save_pretrained(path)
    return model


LLAMA_IDS = np.array([[3, 17, 8, 40, 2]])
LLAMA_TARGETS = ["q_proj", "v_proj", "down_proj"]


def hf_logits(model) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(LLAMA_IDS)).logits.numpy()


def test_an_ember_adapter_loads_into_peft_with_the_same_outputs(tmp_path):
    hf = tiny_llama(tmp_path / "base")
    base = hf_logits(hf)
    model = LlamaForCausalLM.from_dir(tmp_path / "base")
    apply_lora(model, LoraConfig(rank=4, alpha=8, targets=LLAMA_TARGETS, init="random"))
    save_adapter(model, tmp_path / "adapter")
    saved, _ = store.load(tmp_path / "adapter" / "adapter_model.safetensors")
    assert "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight" in saved
    assert saved["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"].shape == (4, 32)
    loaded = peft.PeftModel.from_pretrained(hf, tmp_path / "adapter").eval()
    ours = model(ember.tensor(LLAMA_IDS)).numpy()
    np.testing.assert_allclose(hf_logits(loaded), ours, atol=1e-5)
    assert np.abs(ours - base).max() > 1e-3


def test_a_peft_adapter_loads_into_ember_with_the_same_outputs(tmp_path):
    hf = tiny_llama(tmp_path / "base")
    config = peft.LoraConfig(r=3, lora_alpha=7, target_modules=LLAMA_TARGETS + ["embed_tokens"],
                             init_lora_weights=False, use_rslora=True)
    wrapped = peft.get_peft_model(hf, config).eval()
    wrapped.save_pretrained(tmp_path / "adapter", save_embedding_layers=False)
    expected = hf_logits(wrapped)
    with wrapped.disable_adapter():
        base = hf_logits(wrapped)
    model = LlamaForCausalLM.from_dir(tmp_path / "base")
    load_adapter(model, tmp_path / "adapter")
    np.testing.assert_allclose(model(ember.tensor(LLAMA_IDS)).numpy(), expected, atol=1e-5)
    assert np.abs(expected - base).max() > 1e-3
    with disable_adapters(model):
        np.testing.assert_allclose(model(ember.tensor(LLAMA_IDS)).numpy(), base, atol=1e-5)


def test_mismatched_adapter_files_raise_naming_the_key_and_shapes(tmp_path):
    tiny_llama(tmp_path / "base")
    tiny_llama(tmp_path / "wide", hidden=48)
    source = LlamaForCausalLM.from_dir(tmp_path / "wide")
    apply_lora(source, LoraConfig(rank=4, targets=["q_proj"], init="random"))
    save_adapter(source, tmp_path / "wide-adapter")
    model = LlamaForCausalLM.from_dir(tmp_path / "base")
    key = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    with pytest.raises(ShapeError, match=rf"{key}: file \(4, 48\), model \(4, 32\)"):
        load_adapter(model, tmp_path / "wide-adapter")
    assert adapter_names(model) == [] and all(not p.frozen for p in model.parameters())

    source = LlamaForCausalLM.from_dir(tmp_path / "base")
    apply_lora(source, LoraConfig(rank=4, targets=["q_proj"]))
    save_adapter(source, tmp_path / "adapter")
    config_file = tmp_path / "adapter" / "adapter_config.json"
    good = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**good, "r": 2}))  # wrong rank
    with pytest.raises(ShapeError, match=rf"{key}: file \(4, 32\), model \(2, 32\)"):
        load_adapter(model, tmp_path / "adapter")
    config_file.write_text(json.dumps({**good, "use_dora": True}))
    with pytest.raises(StoreError, match="use_dora"):
        load_adapter(model, tmp_path / "adapter")
    config_file.write_text(json.dumps(good))
    state, _ = store.load(tmp_path / "adapter" / "adapter_model.safetensors", mmap=False)
    del state[key]
    store.save(tmp_path / "adapter" / "adapter_model.safetensors", state)
    with pytest.raises(StoreError, match=rf"missing \['{key} \(4, 32\)'\]"):
        load_adapter(model, tmp_path / "adapter")
    assert adapter_names(model) == []
