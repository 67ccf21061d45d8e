"""QLoRA (ember/lora/qlora.py): adapters over a quantized base, against the same adapters over the
dequantized weights as plain Linear layers (the reference), on the numpy and cpu devices."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import quant
from ember.lora import LoraConfig, apply_lora, apply_qlora, load_adapter, save_adapter, trainable_parameters
from ember.nn import Linear, Module
from ember.optim import AdamW


class Block(Module):
    def __init__(self) -> None:
        self.q_proj = Linear(64, 40)
        self.v_proj = Linear(64, 40, bias=False)
        self.o_proj = Linear(40, 64)
        self.lm_head = Linear(64, 11)

    def forward(self, x):
        return self.lm_head(self.o_proj(self.q_proj(x) * self.v_proj(x)))


CONFIG = LoraConfig(rank=4, alpha=8, targets=["q_proj", "v_proj"], init="random")


def twins(scheme, seed=0):
    """The QLoRA model and its reference: the same base with each quantized weight dequantized, and the
    same adapters."""
    ember.manual_seed(seed)
    model = apply_qlora(Block(), CONFIG, scheme=scheme, compute_dtype="f32")
    reference = Block()
    for name in ("q_proj", "v_proj", "o_proj"):
        layer, twin = getattr(model, name), getattr(reference, name)
        assert type(layer).__name__ == "QuantLinear", name
        twin.weight.set(layer.weight.dequantize())
        if layer.bias is not None:
            twin.bias.set(layer.bias.value)
    reference.lm_head.load_state_dict(model.lm_head.state_dict())
    apply_lora(reference, CONFIG)
    lora = {n: p for n, p in model.named_parameters() if "lora_" in n}
    for n, p in reference.named_parameters():
        if "lora_" in n:
            p.set(lora[n].value)
    return model, reference


@pytest.mark.parametrize("scheme", [quant.nf4(block=64, double_quant=True), quant.int4(block=32), quant.int8(axis=0)],
                         ids=["nf4-dq", "int4-b32", "int8-channel"])
@pytest.mark.parametrize("kind", ["numpy", "cpu"])
def test_adapter_gradients_match_the_dequantized_reference(scheme, kind):
    model, reference = twins(scheme)
    ad = getattr(ember.Device, kind)().autodiff()
    model, reference = model.to(ad), reference.to(ad)
    x = ember.tensor(np.random.default_rng(1).standard_normal((3, 5, 64)).astype(np.float32), device=ad)
    out, want = model(x), reference(x)
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)
    grads, ref_grads = (out ** 2).mean().backward(), (want ** 2).mean().backward()
    ref = dict(reference.named_parameters())
    trained = [(n, p) for n, p in model.named_parameters() if not p.frozen]
    assert sorted(n for n, _ in trained) == sorted(n for n, p in ref.items() if not p.frozen)
    assert trained and all("lora_" in n for n, _ in trained)
    for n, p in trained:
        np.testing.assert_allclose(p.grad(grads).numpy(), ref[n].grad(ref_grads).numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=n)


def test_the_base_stays_quantized_and_frozen_while_the_adapters_learn(tmp_path):
    ember.manual_seed(4)
    model = apply_qlora(Block(), CONFIG)
    assert type(model.lm_head) is Linear  # the head is kept by default
    assert model.q_proj.weight.scheme == quant.nf4(block=64, double_quant=True)
    assert model.q_proj.lora_A["default"].weight.dtype == ember.bf16  # compute_dtype
    report = trainable_parameters(model)
    assert report.trainable == 2 * (4 * 64 + 40 * 4) and report.trainable < report.total
    ad = ember.Device.cpu().autodiff()
    model = model.to(ad)
    base = {n: b.parts["values"].numpy().copy() for n, b in model.named_buffers() if isinstance(b, ember.QTensor)}
    x = ember.tensor(np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32), device=ad)
    target = ember.tensor(np.random.default_rng(3).standard_normal((4, 11)).astype(np.float32), device=ad)
    opt = AdamW(model, lr=1e-2)
    losses = []
    for _ in range(6):
        loss = ((model(x).to(ember.f32) - target) ** 2).mean()
        opt.step(loss.backward())
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    for n, b in model.named_buffers():
        if n in base:
            assert np.array_equal(b.parts["values"].numpy(), base[n]), n
    save_adapter(model, tmp_path)
    ember.manual_seed(4)  # the same base, so the same quantized weights: the file carries adapters only
    fresh = quant.quantize_weights(Block(), quant.nf4(block=64, double_quant=True), modules="proj",
                                   embeddings=False).to(ad)
    assert not np.array_equal(fresh(x).numpy(), model(x).numpy())
    load_adapter(fresh, tmp_path, dtype="bf16")
    np.testing.assert_array_equal(fresh(x).numpy(), model(x).numpy())
