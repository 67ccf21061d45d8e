"""Models built, trained and saved by PyTorch (`torch.save(model.state_dict(), path)`), loaded into the
equivalent ember model with `load_module`, give PyTorch's outputs (f32, 1e-5).

Each ember twin names its parts like the torch model. Models of Linear, conv and norm layers load as
they are; `adapter="pytorch"` bridges the names of attention, recurrent and transformer layers (no
layout differs, so it transposes nothing).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn as tnn

import ember
from ember import nn
from ember.errors import ShapeError
from ember.store import from_pytorch, load_module

DEVICE = ember.Device.cpu()
TOL = dict(rtol=1e-5, atol=1e-5)


def saved(tmp_path, model: tnn.Module, name: str = "model.pt"):
    path = tmp_path / name
    torch.save(model.state_dict(), path)
    return path


def assert_matches(ember_out: ember.Tensor, torch_out: torch.Tensor) -> None:
    np.testing.assert_allclose(ember_out.numpy(), torch_out.detach().numpy(), **TOL)


def random_input(*shape: int) -> np.ndarray:
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)


# ---- MLP ------------------------------------------------------------------------------------------

class TorchMLP(tnn.Module):
    def __init__(self):
        super().__init__()
        self.layers = tnn.Sequential(tnn.Linear(6, 16), tnn.ReLU(), tnn.Linear(16, 3))

    def forward(self, x):
        return self.layers(x)


class MLP(nn.Module):
    def __init__(self):
        self.layers = [nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)]

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_mlp(tmp_path):
    torch.manual_seed(0)
    twin, model = TorchMLP().eval(), MLP()
    report = load_module(model.to(DEVICE), saved(tmp_path, twin))
    assert report.ok
    assert model.layers[0].weight.shape == (16, 6)  # PyTorch's (out, in)
    x = random_input(5, 6)
    assert_matches(model(ember.tensor(x, device=DEVICE)), twin(torch.from_numpy(x)))


def test_a_bare_sequential_loads_through_rename(tmp_path):
    torch.manual_seed(1)
    twin = tnn.Sequential(tnn.Linear(6, 16), tnn.ReLU(), tnn.Linear(16, 3)).eval()  # keys "0.weight", ...
    model = MLP()
    assert load_module(model, saved(tmp_path, twin), rename=[(r"^", "layers.")]).ok
    x = random_input(4, 6)
    assert_matches(model(ember.tensor(x)), twin(torch.from_numpy(x)))


# ---- CNN ------------------------------------------------------------------------------------------

class TorchCNN(tnn.Module):
    def __init__(self):
        super().__init__()
        self.conv = tnn.Conv2d(2, 4, 3, padding=1)
        self.bn = tnn.BatchNorm2d(4)
        self.pool = tnn.MaxPool2d(2)
        self.fc = tnn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        return self.fc(self.pool(torch.relu(self.bn(self.conv(x)))).flatten(1))


class CNN(nn.Module):
    def __init__(self):
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        return self.fc(self.pool(self.bn(self.conv(x)).relu()).flatten(1))


def test_cnn_with_batch_norm_statistics(tmp_path):
    torch.manual_seed(2)
    twin = TorchCNN()
    with torch.no_grad():  # a few training-mode batches give the BatchNorm non-trivial running statistics
        for _ in range(3):
            twin(torch.randn(8, 2, 8, 8) * 3 + 1)
    twin.eval()
    model = CNN()
    report = load_module(model, saved(tmp_path, twin))
    assert report.ok
    assert model.eval().bn.num_batches_tracked.item() == 3
    x = random_input(3, 2, 8, 8)
    assert_matches(model(ember.tensor(x)), twin(torch.from_numpy(x)))


# ---- recurrent ------------------------------------------------------------------------------------

class TorchTagger(tnn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = tnn.LSTM(5, 8, num_layers=2, batch_first=True, bidirectional=True)
        self.head = tnn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.lstm(x)[0])


class Tagger(nn.Module):
    def __init__(self):
        self.lstm = nn.LSTM(5, 8, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.lstm(x)[0])


def test_lstm(tmp_path):
    torch.manual_seed(3)
    twin, model = TorchTagger().eval(), Tagger()
    assert load_module(model, saved(tmp_path, twin), adapter="pytorch").ok
    x = random_input(2, 7, 5)
    assert_matches(model(ember.tensor(x)), twin(torch.from_numpy(x)))


@pytest.mark.parametrize("ember_cls, torch_cls", [(nn.GRU, tnn.GRU), (nn.RNN, tnn.RNN)])
def test_gru_and_rnn(tmp_path, ember_cls, torch_cls):
    torch.manual_seed(4)
    twin, model = torch_cls(3, 6, num_layers=2, bidirectional=True).eval(), ember_cls(3, 6, num_layers=2,
                                                                                      bidirectional=True)
    assert load_module(model, saved(tmp_path, twin), adapter="pytorch").ok
    x = random_input(4, 2, 3)
    out, h = model(ember.tensor(x))
    t_out, t_h = twin(torch.from_numpy(x))
    assert_matches(out, t_out)
    assert_matches(h, t_h)


# ---- attention and transformers -------------------------------------------------------------------

def test_transformer_encoder(tmp_path):
    torch.manual_seed(5)
    layer = tnn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    twin = tnn.TransformerEncoder(layer, num_layers=2, norm=tnn.LayerNorm(16), enable_nested_tensor=False).eval()
    model = nn.TransformerEncoder(16, 4, 32, num_layers=2, dropout=0.0, final_norm=True)
    assert load_module(model, saved(tmp_path, twin), adapter="pytorch").ok
    x = random_input(2, 5, 16)
    assert_matches(model.eval()(ember.tensor(x)), twin(torch.from_numpy(x)))


def test_transformer_decoder_layer_cross_attention(tmp_path):
    torch.manual_seed(6)
    twin = tnn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=True).eval()
    model = nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, norm_first=True)
    assert load_module(model, saved(tmp_path, twin), adapter="pytorch").ok
    x, memory = random_input(2, 3, 8), random_input(2, 5, 8)
    assert_matches(model.eval()(ember.tensor(x), ember.tensor(memory)),
                   twin(torch.from_numpy(x), torch.from_numpy(memory)))


def test_attention_with_separate_key_and_value_widths(tmp_path):
    torch.manual_seed(7)
    twin = tnn.MultiheadAttention(8, 2, kdim=5, vdim=3, batch_first=True).eval()  # q/k/v_proj_weight
    model = nn.MultiHeadAttention(8, 2, kdim=5, vdim=3)
    assert load_module(model, saved(tmp_path, twin), adapter="pytorch").ok
    q, k, v = random_input(2, 3, 8), random_input(2, 4, 5), random_input(2, 4, 3)
    expected, _ = twin(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v))
    assert_matches(model(ember.tensor(q), ember.tensor(k), ember.tensor(v)), expected)


def test_layers_with_pytorch_layout_pass_through(tmp_path):
    torch.manual_seed(8)
    twin = tnn.ModuleDict({"emb": tnn.Embedding(7, 4), "bil": tnn.Bilinear(3, 2, 5), "fc": tnn.Linear(3, 3),
                           "deconv": tnn.ConvTranspose1d(4, 6, 3, stride=2), "norm": tnn.GroupNorm(2, 6)})
    model = nn.Module()
    model.emb, model.bil, model.fc = nn.Embedding(7, 4), nn.Bilinear(3, 2, 5), nn.Linear(3, 3)
    model.deconv, model.norm = nn.ConvTranspose1d(4, 6, 3, stride=2), nn.GroupNorm(2, 6)
    assert load_module(model, saved(tmp_path, twin), adapter="pytorch").ok
    ids, a, b, s = np.array([[1, 6, 0]]), random_input(2, 3), random_input(2, 2), random_input(1, 4, 5)
    assert_matches(model.fc(ember.tensor(a)), twin["fc"](torch.from_numpy(a)))
    assert_matches(model.emb(ember.tensor(ids)), twin["emb"](torch.from_numpy(ids)))
    assert_matches(model.bil(ember.tensor(a), ember.tensor(b)), twin["bil"](torch.from_numpy(a), torch.from_numpy(b)))
    assert_matches(model.norm(model.deconv(ember.tensor(s))), twin["norm"](twin["deconv"](torch.from_numpy(s))))


# ---- what the adapter does not take ---------------------------------------------------------------

def test_keys_ember_lacks_are_reported_not_dropped(tmp_path):
    torch.manual_seed(9)
    twin = tnn.MultiheadAttention(8, 2, add_bias_kv=True, batch_first=True)  # bias_k, bias_v: no ember twin
    path = saved(tmp_path, twin)
    model = nn.MultiHeadAttention(8, 2)
    with pytest.raises(KeyError, match=r"model\.pt.*unexpected keys \['bias_k', 'bias_v'\]"):
        load_module(model, path, adapter="pytorch")
    report = load_module(model, path, adapter="pytorch", strict=False)
    assert report.unexpected == ["bias_k", "bias_v"] and not report.missing and not report.mismatched
    np.testing.assert_array_equal(model.output.weight.numpy(), twin.out_proj.weight.detach().numpy())


def test_partial_import_of_a_sub_model(tmp_path):
    torch.manual_seed(10)
    twin = TorchTagger()
    head = nn.Linear(16, 3)
    assert load_module(head, saved(tmp_path, twin), prefix="head.").ok
    np.testing.assert_array_equal(head.weight.numpy(), twin.head.weight.detach().numpy())


def test_wrong_packed_projection_names_key_and_shapes():
    state = {"in_proj_weight": np.zeros((20, 8), np.float32)}
    with pytest.raises(ShapeError, match=r"in_proj_weight.*\(24, 8\).*\(20, 8\)"):
        from_pytorch(nn.MultiHeadAttention(8, 2), state)


def test_mismatched_linear_reports_both_shapes(tmp_path):
    twin = tnn.Linear(4, 3)
    report = load_module(nn.Linear(5, 3), saved(tmp_path, twin), strict=False)
    assert report.mismatched == [("weight", (3, 5), (3, 4))]


class Transformer(nn.Module):
    """torch.nn.Transformer's parts under its names: `encoder` and `decoder`, each with a final norm."""

    def __init__(self):
        self.encoder = nn.TransformerEncoder(8, 2, 16, num_layers=2, dropout=0.0, final_norm=True)
        self.decoder = nn.TransformerDecoder(8, 2, 16, num_layers=1, dropout=0.0, final_norm=True)

    def forward(self, src, tgt):
        return self.decoder(tgt, self.encoder(src), tgt_is_causal=True)


def test_whole_torch_transformer(tmp_path):
    torch.manual_seed(11)
    twin = tnn.Transformer(8, 2, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=16, dropout=0.0,
                           batch_first=True).eval()
    model = Transformer()
    assert load_module(model, saved(tmp_path, twin), adapter="pytorch").ok
    src, tgt = random_input(2, 5, 8), random_input(2, 3, 8)
    causal = tnn.Transformer.generate_square_subsequent_mask(3)
    expected = twin(torch.from_numpy(src), torch.from_numpy(tgt), tgt_mask=causal, tgt_is_causal=True)
    assert_matches(model.eval()(ember.tensor(src), ember.tensor(tgt)), expected)
