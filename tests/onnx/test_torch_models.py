"""Real models exported by torch.onnx (random weights, no network) run by ember.onnx against onnxruntime:
torchvision's ResNet-18 and MobileNetV3-Small (rebuilt in `vision_models.py`), a tiny GPT-2 and a tiny
Llama from transformers at dynamic batch and sequence, and a bidirectional two-layer LSTM, on the numpy
and cpu devices (all-MiniLM-L6-v2 is in test_onnx_models.py)."""

from __future__ import annotations

import io

import numpy as np
import onnxruntime as ort
import pytest
import torch

import ember
from ember.onnx import load

from vision_models import MobileNetV3Small, ResNet18, randomize_batchnorm

DEVICES = [("numpy", ember.Device.numpy), ("cpu", ember.Device.cpu)]
ATOL = 1e-4


def export(module, args, names, dynamic=None, outputs=("y",)) -> bytes:
    f = io.BytesIO()
    torch.onnx.export(module.eval(), args, f, dynamo=False, input_names=list(names), output_names=list(outputs),
                      dynamic_axes=dynamic, opset_version=17)
    return f.getvalue()


def ort_run(data: bytes, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)


def close(got, want) -> None:
    """Within 1e-4 of onnxruntime, and within 1e-5 of the output's scale (the outputs are small)."""
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=ATOL)
    assert np.abs(got - want).max() <= 1e-5 * max(1.0, np.abs(want).max())


@pytest.fixture(scope="module", params=["resnet18", "mobilenet_v3_small"])
def vision(request):
    torch.manual_seed(0)
    model = randomize_batchnorm({"resnet18": ResNet18, "mobilenet_v3_small": MobileNetV3Small}[request.param]())
    return export(model, (torch.randn(1, 3, 40, 40),), ["x"], {"x": {0: "batch"}, "y": {0: "batch"}})


@pytest.mark.parametrize("name,make", DEVICES, ids=[d[0] for d in DEVICES])
def test_vision_models_match_onnxruntime(vision, name, make):
    x = np.random.default_rng(1).standard_normal((2, 3, 40, 40), dtype=np.float32)  # another batch size
    (y,) = load(vision, device=make())(x)
    close(y.numpy(), ort_run(vision, {"x": x})[0])


class Logits(torch.nn.Module):
    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, ids, mask):
        return self.lm(input_ids=ids, attention_mask=mask, use_cache=False).logits


def _tiny(kind: str):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(1)
    if kind == "gpt2":
        config = transformers.GPT2Config(vocab_size=53, n_positions=32, n_embd=16, n_layer=2, n_head=2,
                                         bos_token_id=0, eos_token_id=0)
        return transformers.GPT2LMHeadModel(config)
    config = transformers.LlamaConfig(vocab_size=53, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    return transformers.LlamaForCausalLM(config)


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def causal_lm(request):
    axes = {0: "batch", 1: "seq"}
    ids = torch.randint(0, 53, (2, 5))
    return export(Logits(_tiny(request.param)), (ids, torch.ones_like(ids)), ["ids", "mask"],
                  {"ids": axes, "mask": axes, "y": axes})


@pytest.mark.parametrize("name,make", DEVICES, ids=[d[0] for d in DEVICES])
def test_transformers_causal_lms_dynamic_batch_and_sequence(causal_lm, name, make):
    model = load(causal_lm, device=make())
    rng = np.random.default_rng(2)
    for batch, seq in ((3, 7), (1, 2)):
        feeds = {"ids": rng.integers(0, 53, (batch, seq)).astype(np.int64), "mask": np.ones((batch, seq), np.int64)}
        feeds["mask"][0, 0] = 0  # a padded position
        close(model.run(feeds)["y"].numpy(), ort_run(causal_lm, feeds)[0])


@pytest.mark.parametrize("name,make", DEVICES, ids=[d[0] for d in DEVICES])
def test_lstm_dynamic_sequence_and_batch(name, make):
    torch.manual_seed(3)
    lstm = torch.nn.LSTM(5, 6, num_layers=2, bidirectional=True)
    data = export(lstm, (torch.randn(4, 3, 5),), ["x"], {"x": {0: "seq", 1: "batch"}}, outputs=("y", "h", "c"))
    model = load(data, device=make())
    xs = np.random.default_rng(4).standard_normal((7, 2, 5), dtype=np.float32)
    for got, want in zip(model(xs), ort_run(data, {"x": xs}), strict=True):
        close(got.numpy(), want)
