"""GPTQ (ember/quant/gptq.py, `quantize_gptq`): the codes and scales equal a textbook NumPy GPTQ written
here (one column at a time, no lazy blocks, scales and codes from scratch), the layer's output error on
correlated inputs is well below round-to-nearest's, and the recipe's Hessians are the inputs' X^T X."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import nn, quant
from ember.errors import QuantSchemeError
from ember.qscheme import reference


def _textbook_gptq(w, h, top, block, damp=0.01, act_order=False):
    """GPTQ on symmetric integer codes -top..top with abs-max scales per `block` columns (None: per row);
    (codes, scales) with the scales of each block taken from the updated weights (act_order: from the
    original ones)."""
    w = w.astype(np.float64).copy()
    rows, k = w.shape
    h = h.astype(np.float64).copy()
    h[np.diag(h) == 0, np.diag(h) == 0] = 1
    order = np.argsort(-np.diag(h), kind="stable") if act_order else np.arange(k)
    h = h[order][:, order] + damp * np.diag(h).mean() * np.eye(k)
    hinv = np.linalg.inv(h)
    g = block or k

    def scale_of(cols):
        return (np.abs(cols.astype(np.float32)).max(axis=1) / np.float32(top)).astype(np.float32)

    scales = np.zeros((rows, -(-k // g)), np.float32)
    if act_order or block is None:
        for b in range(scales.shape[1]):
            scales[:, b] = scale_of(w[:, b * g:(b + 1) * g])
    w = w[:, order]
    codes = np.zeros((rows, k), np.int64)
    for j in range(k):
        col = order[j]
        if not act_order and block is not None and col % g == 0:
            scales[:, col // g] = scale_of(w[:, j:j + g])
        s = scales[:, col // g]
        inv = np.where(s > 0, np.float32(1) / np.where(s > 0, s, 1), 0).astype(np.float32)
        c = np.clip(np.round(w[:, j].astype(np.float32) * inv), -top, top)
        codes[:, col] = c
        # the textbook update: the error of column j through row j of the inverse Hessian, which is
        # then restricted to the columns left (a Schur complement step)
        err = (w[:, j] - s * c.astype(np.float32)) / hinv[j, j]  # the dequantized code in f32
        w[:, j + 1:] -= np.outer(err, hinv[j, j + 1:])
        hinv = hinv - np.outer(hinv[:, j], hinv[j, :]) / hinv[j, j]
    return codes, scales


def _correlated(rng, n, k):
    """Inputs whose features are strongly correlated and of unequal size (as a layer's inputs are)."""
    mix = rng.standard_normal((k, k)) * 0.3 + np.eye(k)
    return (rng.standard_normal((n, k)) @ mix * rng.uniform(0.2, 3, k)).astype(np.float32)


@pytest.mark.parametrize("scheme, top, block, act_order", [
    (quant.int4(block=8), 7, 8, False),
    (quant.int4(block=8), 7, 8, True),
    (quant.int8(axis=0), 127, None, False),
    (quant.int8(axis=0), 127, None, True),
])
def test_gptq_codes_equal_a_textbook_implementation(rng, scheme, top, block, act_order):
    w = rng.standard_normal((11, 37)).astype(np.float32)  # 37: a last, shorter block of 5
    x = _correlated(rng, 300, 37)
    x[:, 4] = 0  # an input never seen: diag 0
    h = x.astype(np.float64).T @ x
    q = quant.gptq_quantize(ember.from_numpy(w), h, scheme, act_order=act_order, block_size=16)
    codes, scales = _textbook_gptq(w, h, top, block, act_order=act_order)
    got = reference.unpack(q.parts["values"].numpy(), scheme.bits, 37).astype(np.int64)
    np.testing.assert_array_equal(np.where(got >= 2 ** (scheme.bits - 1), got - 2 ** scheme.bits, got), codes)
    np.testing.assert_array_equal(q.parts["scales"].numpy(), scales.reshape(q.parts["scales"].shape))
    np.testing.assert_array_equal(q.dequantize().numpy(), (np.repeat(scales, block or 37, axis=1)[:, :37] * codes).astype(np.float32))


@pytest.mark.parametrize("scheme", [quant.int4(block=16), quant.int4(block=16, affine=True), quant.nf4(block=16),
                                    quant.nf4(block=16, double_quant=True), quant.int8(axis=0), quant.int4(axis=0),
                                    quant.mxfp4(), quant.fp8_e4m3(axis=0)])
def test_gptq_lowers_the_output_error_of_round_to_nearest(rng, scheme):
    w = rng.standard_normal((24, 64)).astype(np.float32)
    x, test = np.split(_correlated(rng, 600, 64), [400])
    h = x.astype(np.float64).T @ x
    gptq = quant.gptq_quantize(ember.from_numpy(w), h, scheme).dequantize().numpy()
    rtn = ember.from_numpy(w).quantize(scheme).dequantize().numpy()

    def error(q, inputs):
        return np.square(inputs @ (q - w).T).sum()

    # on the calibration inputs and on held-out ones of the same distribution
    assert error(gptq, x) < 0.75 * error(rtn, x), scheme
    assert error(gptq, test) < 0.9 * error(rtn, test), scheme


def test_gptq_mse_scales_and_bad_input():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 32)).astype(np.float32)
    x = _correlated(rng, 200, 32)
    h = x.T.astype(np.float64) @ x
    plain = quant.gptq_quantize(ember.from_numpy(w), h, quant.nf4(block=16)).dequantize().numpy()
    mse = quant.gptq_quantize(ember.from_numpy(w), h, quant.nf4(block=16), method="mse").dequantize().numpy()
    assert np.square(x @ (mse - w).T).sum() < np.square(x @ (plain - w).T).sum()
    with pytest.raises(QuantSchemeError, match=r"int8\(per channel axis=1.*input axis.*\(8, 32\)"):
        quant.gptq_quantize(ember.from_numpy(w), h, quant.int8(axis=1))
    with pytest.raises(QuantSchemeError, match=r"Hessian.*\(8, 32\) and \(31, 31\)"):
        quant.gptq_quantize(ember.from_numpy(w), h[:31, :31], quant.int4(block=8))
    with pytest.raises(QuantSchemeError, match=r"not positive definite"):
        quant.gptq_quantize(ember.from_numpy(w), -np.eye(32), quant.int4(block=8))


def test_quantize_gptq_collects_input_hessians_and_replaces_the_layers(device, rng):
    ember.seed(0)
    model = nn.Sequential(nn.Linear(20, 40), nn.GELU(), nn.Linear(40, 6)).to(device)
    batches = [ember.from_numpy(_correlated(rng, 9, 20)).to(device) for _ in range(3)]
    hessians = quant.input_hessians(model, batches)
    xs = np.concatenate([b.numpy() for b in batches])
    hidden = model[1](model[0](ember.from_numpy(xs).to(device))).numpy()
    np.testing.assert_allclose(hessians["0"].numpy(), xs.T.astype(np.float64) @ xs, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(hessians["2"].numpy(), hidden.T.astype(np.float64) @ hidden, rtol=1e-4, atol=1e-3)
    want = {name: quant.gptq_quantize(model[int(name)].weight.value, hessians[name], quant.int4(block=8))
            for name in ("0", "2")}
    out = quant.quantize_gptq(model, batches, quant.int4(block=8))
    assert [type(m).__name__ for m in out] == ["QuantLinear", "GELU", "QuantLinear"]
    for name, q in want.items():
        assert out[int(name)].weight.device is device
        np.testing.assert_array_equal(out[int(name)].weight.parts["values"].numpy(), q.parts["values"].numpy())
    with pytest.raises(QuantSchemeError, match=r"layer '0' saw no input"):
        quant.quantize_gptq(nn.Sequential(nn.Linear(4, 4)), [], quant.int4(block=4))
