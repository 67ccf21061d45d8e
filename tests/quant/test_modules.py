"""Quantized layers and recipes (ember/quant): QuantLinear and QuantEmbedding against torch on the
dequantized weights, the selection by ParamGroup and by module name, state-dict keys, the dynamic and
static recipes against their definitions, observers, and QAT training through fake-quantized weights."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import nn, quant
from ember.nn import ParamGroup

torch = pytest.importorskip("torch")


def _model():
    ember.seed(3)
    return nn.Sequential(nn.Embedding(13, 40, padding_idx=0), nn.Linear(40, 27), nn.Linear(27, 5, bias=False))


@pytest.mark.parametrize("scheme", [quant.int4(block=16), quant.int8(axis=1, affine=True)], ids=str)
def test_quant_linear_and_embedding_match_torch_on_the_dequantized_weights(device, rng, scheme):
    """Per block along `in` (the quantized matmul's layout) and per channel along `in` (stored (in, out):
    the dequantizing path)."""
    model = quant.quantize_weights(_model().to(device), scheme, embeddings=True)
    emb, lin = model[0], model[1]
    ids = rng.integers(0, 13, size=(3, 7))
    x = rng.standard_normal((4, 3, 40)).astype(np.float32)
    w = torch.tensor(np.asarray(lin.weight.dequantize().numpy()))
    want = torch.nn.functional.linear(torch.tensor(x), w, torch.tensor(np.asarray(lin.bias.numpy())))
    np.testing.assert_allclose(lin(ember.from_numpy(x).to(device)).numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    table = torch.tensor(np.asarray(emb.weight.dequantize().numpy()))
    got = emb(ember.tensor(ids, device=device)).numpy()
    np.testing.assert_array_equal(got, torch.nn.functional.embedding(torch.tensor(ids), table).numpy())
    column = quant.QuantEmbedding(ember.randn(13, 6, device=device).quantize(quant.int8(axis=1)))
    np.testing.assert_array_equal(column(ember.tensor(ids, device=device)).numpy(),
                                  column.weight.dequantize().numpy()[ids])


def test_quantize_weights_selects_by_group_and_name_and_keeps_keys():
    model = _model()
    keys = sorted(model.state_dict())
    only_first = quant.quantize_weights(_model(), quant.nf4(block=8), group=ParamGroup(prefix="1."))
    assert [type(m).__name__ for m in only_first] == ["Embedding", "QuantLinear", "Linear"]
    by_name = quant.quantize_weights(_model(), quant.int8(axis=0), modules=r"^2$", embeddings=False)
    assert [type(m).__name__ for m in by_name] == ["Embedding", "Linear", "QuantLinear"]
    # by default tables are quantized for 8-bit codes only (as bitsandbytes keeps them at 4 bits)
    four = quant.quantize_weights(_model(), quant.int4(block=8), method="mse")
    assert [type(m).__name__ for m in four] == ["Embedding", "QuantLinear", "QuantLinear"]
    eight = quant.quantize_weights(_model(), quant.fp8_e4m3(axis=0))
    assert [type(m).__name__ for m in eight] == ["QuantEmbedding", "QuantLinear", "QuantLinear"]
    w = _model()[1].weight.value
    np.testing.assert_array_equal(four[1].weight.parts["scales"].numpy(),
                                  w.quantize(quant.int4(block=8), method="mse").parts["scales"].numpy())
    everything = quant.quantize_weights(model, quant.int8(axis=0))
    assert sorted(everything.state_dict()) == keys and everything.num_params(trainable_only=True) == 0
    assert isinstance(everything.state_dict()["2.weight"], ember.QTensor)
    single = quant.quantize_weights(nn.Linear(8, 3), quant.int8())
    assert isinstance(single, quant.QuantLinear)
    f32_bytes = 13 * 40 * 4 + 27 * 40 * 4 + 5 * 27 * 4
    assert quant.weight_bytes(_model()) == f32_bytes
    assert quant.weight_bytes(everything) == 13 * 40 + 13 * 4 + 27 * 40 + 27 * 4 + 5 * 27 + 5 * 4


def test_dynamic_quantization_is_per_token_int8_of_the_input(rng):
    layer = nn.Linear(24, 9)
    dynamic = quant.quantize_dynamic(nn.Sequential(layer))[0]
    x = rng.standard_normal((2, 5, 24)).astype(np.float32) * np.linspace(0.1, 10, 5, dtype=np.float32)[:, None]
    scale = np.abs(x).max(-1, keepdims=True) / np.float32(127)
    xq = np.clip(np.round(x * (np.float32(1) / scale)), -127, 127) * scale  # per-token int8 of the input
    wq = np.asarray(dynamic.weight.dequantize().numpy())
    want = torch.nn.functional.linear(torch.tensor(xq), torch.tensor(wq), torch.tensor(np.asarray(layer.bias.numpy())))
    np.testing.assert_allclose(dynamic(ember.from_numpy(x)).numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_static_quantization_calibrates_with_observers(rng):
    batches = [ember.from_numpy(rng.standard_normal((8, 24)).astype(np.float32) * (i + 1)) for i in range(3)]
    highest = max(float(np.abs(b.numpy()).max()) for b in batches)
    model = quant.quantize_static(nn.Sequential(nn.Linear(24, 6)), batches)
    layer = model[0]
    assert layer.input_scale.item() == pytest.approx(highest / 127, rel=1e-6)
    x = ember.from_numpy(rng.standard_normal((3, 24)).astype(np.float32) * 4)
    xq = ember.quantize(x, quant.int8(), layer.input_scale).dequantize()
    want = nn.functional.linear(xq, layer.weight.dequantize(), layer.bias)
    np.testing.assert_allclose(layer(x).numpy(), want.numpy(), rtol=1e-6, atol=2e-6)  # another summation order
    values = rng.standard_normal(10000).astype(np.float32)
    for observer, scheme, (scale, zero) in [
        (quant.MinMaxObserver(), quant.int8(affine=True),
         ((values.max() - values.min()) / 255, round(-values.min() / ((values.max() - values.min()) / 255)))),
        (quant.PercentileObserver(99.0), quant.int8(), (np.percentile(np.abs(values), 99.0) / 127, None)),
        (quant.AbsMeanObserver(), quant.int2(), (np.abs(values).mean(), None)),
    ]:
        observer.observe(ember.from_numpy(values))
        got_scale, got_zero = observer.qparams(scheme)
        assert got_scale == pytest.approx(scale, rel=1e-5) and got_zero == zero
    with pytest.raises(ember.errors.QuantSchemeError, match="observed nothing"):
        quant.MinMaxObserver().qparams(quant.int8())


def test_qat_trains_through_fake_quantized_weights_then_freezes(rng):
    device = ember.Device.numpy().autodiff()
    ember.seed(0)
    model = quant.prepare_qat(nn.Sequential(nn.Linear(16, 4)), quant.int4(block=8), input_scheme=quant.int8()).to(device)
    assert isinstance(model[0], quant.QATLinear) and sorted(model.state_dict()) == ["0.bias", "0.weight"]
    x = ember.from_numpy(rng.standard_normal((32, 16)).astype(np.float32)).to(device)
    target = ember.from_numpy(rng.standard_normal((32, 4)).astype(np.float32)).to(device)
    opt = ember.optim.SGD(model, lr=0.1)
    losses = []
    for _ in range(30):
        loss = ((model(x) - target) ** 2).mean()
        opt.step(loss.backward())
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]
    trained = model[0].weight.value.inner()
    frozen = quant.quantize_weights(model, quant.int4(block=8))
    assert isinstance(frozen[0], quant.QuantLinear)
    np.testing.assert_array_equal(frozen[0].weight.dequantize().numpy(),
                                  ember.fake_quantize(trained, quant.int4(block=8)).numpy())
