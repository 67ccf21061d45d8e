"""The Llama-family and GPT-2 models (ember/models/llama.py, gpt2.py) against transformers: tiny random
models saved with `save_pretrained` (no hub), loaded into ember; logits within 1e-5 (f32) and greedy
generations token for token (through the KV cache), on the NumPy and CPU devices."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ember
from ember.errors import ConfigError
from ember.models import GPT2LMHeadModel, LlamaForCausalLM, load_tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
DEVICES = {"numpy": ember.Device.numpy, "cpu": ember.Device.cpu}
VOCAB = 67
LLAMAS = {  # name -> LlamaConfig overrides: GQA with a tied head, MHA untied with biases, two rope scalings
    "gqa-tied": dict(num_key_value_heads=2, tie_word_embeddings=True),
    "mha-linear": dict(num_key_value_heads=4, attention_bias=True, rope_scaling={"rope_type": "linear", "factor": 2.0}),
    "dynamic": dict(num_key_value_heads=1, rope_scaling={"rope_type": "dynamic", "factor": 3.0}),
    "llama3": dict(num_key_value_heads=2, head_dim=10, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 4}),
}


def save_llama(path, **overrides):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=40, intermediate_size=44, num_hidden_layers=2,
                                      num_attention_heads=4, max_position_embeddings=8, rms_norm_eps=1e-5,
                                      **overrides)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # transformers starts norms at 1 and biases at 0: make them count
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(path)
    return model


def save_gpt2(path, **overrides):
    torch.manual_seed(1)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=24, n_embd=32, n_layer=2, n_head=4,
                                     bos_token_id=0, eos_token_id=0, **overrides)
    model = transformers.GPT2LMHeadModel(config).eval()
    model.save_pretrained(path)
    return model


def greedy(hf, prompt: np.ndarray, steps: int) -> np.ndarray:
    return hf.generate(torch.tensor(prompt), max_new_tokens=steps, do_sample=False, eos_token_id=None,
                       pad_token_id=0).numpy()


@pytest.mark.parametrize("device", list(DEVICES))
@pytest.mark.parametrize("variant", list(LLAMAS))
def test_llama_logits_and_greedy_generation_match_transformers(tmp_path, variant, device):
    hf = save_llama(tmp_path, **LLAMAS[variant])
    model = LlamaForCausalLM.from_dir(tmp_path, device=DEVICES[device]())
    assert (model.lm_head is None) == (variant == "gqa-tied")
    ids = np.random.default_rng(0).integers(0, VOCAB, (2, 11))  # past max_position_embeddings: dynamic scales
    with torch.no_grad():
        expected = hf(torch.tensor(ids)).logits.numpy()
    np.testing.assert_allclose(model(ember.tensor(ids)).numpy(), expected, atol=1e-5, rtol=0)
    prompt = ids[:, :3]
    np.testing.assert_array_equal(model.generate(prompt, max_new_tokens=9), greedy(hf, prompt, 9))


@pytest.mark.parametrize("device", list(DEVICES))
@pytest.mark.parametrize("tied", [True, False])
def test_gpt2_logits_and_greedy_generation_match_transformers(tmp_path, tied, device):
    hf = save_gpt2(tmp_path, tie_word_embeddings=tied)
    model = GPT2LMHeadModel.from_dir(tmp_path, device=DEVICES[device]())
    assert (model.lm_head is None) == tied
    ids = np.random.default_rng(1).integers(0, VOCAB, (3, 7))
    with torch.no_grad():
        expected = hf(torch.tensor(ids)).logits.numpy()
    np.testing.assert_allclose(model(ember.tensor(ids)).numpy(), expected, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(model.generate(ids[:, :2], max_new_tokens=8), greedy(hf, ids[:, :2], 8))


def test_sharded_checkpoint_cache_and_stop_tokens(tmp_path):
    hf = save_llama(tmp_path / "one", num_key_value_heads=2)
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    model = LlamaForCausalLM.from_dir(tmp_path / "sharded")
    reference = LlamaForCausalLM.from_dir(tmp_path / "one")
    ids = np.array([[5, 17, 3, 40]])
    np.testing.assert_array_equal(model(ember.tensor(ids)).numpy(), reference(ember.tensor(ids)).numpy())
    cached = model.generate(ids, max_new_tokens=6)
    np.testing.assert_array_equal(cached, model.generate(ids, max_new_tokens=6, use_cache=False))
    stop = int(cached[0, 6])  # the third new token: generation ends there, as transformers' does
    expected = hf.generate(torch.tensor(ids), max_new_tokens=6, do_sample=False, eos_token_id=stop,
                           pad_token_id=stop).numpy()
    np.testing.assert_array_equal(model.generate(ids, max_new_tokens=6, stop_tokens=[stop]), expected)


def test_sampling_respects_top_k_and_top_p_and_seed(tmp_path):
    save_gpt2(tmp_path)
    model = GPT2LMHeadModel.from_dir(tmp_path)
    prompt = [[4, 9]]
    a = model.generate(prompt, max_new_tokens=6, temperature=1.0, seed=3)
    np.testing.assert_array_equal(a, model.generate(prompt, max_new_tokens=6, temperature=1.0, seed=3))
    logits = model(ember.tensor(np.array(prompt))).numpy()[0, -1]
    top2 = set(np.argsort(-logits)[:2].tolist())
    draws = {int(model.generate(prompt, max_new_tokens=1, temperature=2.0, top_k=2, seed=s)[0, -1]) for s in range(12)}
    assert draws <= top2 and len(draws) == 2
    only = {int(model.generate(prompt, max_new_tokens=1, temperature=1.0, top_p=1e-6, seed=s)[0, -1]) for s in range(4)}
    assert only == {int(np.argmax(logits))}


def test_tokenizer_from_tokenizer_json(tmp_path, minilm_dir):
    tokenizers = pytest.importorskip("tokenizers")
    (tmp_path / "tokenizer.json").write_bytes((minilm_dir / "tokenizer.json").read_bytes())
    ours = load_tokenizer(tmp_path)
    theirs = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    text = "LoRA adapts a frozen model."
    assert ours.encode(text) == theirs.encode(text).ids
    assert ours.decode(ours.encode(text)) == theirs.decode(theirs.encode(text).ids)
    assert load_tokenizer(tmp_path / "nowhere") is None


def test_unsupported_configs_raise(tmp_path):
    save_llama(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    for change, message in (({"rope_scaling": {"rope_type": "yarn", "factor": 2.0}}, "rope_type 'yarn'"),
                            ({"hidden_act": "gelu"}, "hidden_act 'gelu'"), ({"model_type": "bert"}, "model_type")):
        (tmp_path / "config.json").write_text(json.dumps({**config, **change, "rope_parameters": None}))
        with pytest.raises(ConfigError, match=message):
            LlamaForCausalLM.from_dir(tmp_path)
