"""The Llama family of decoders (Llama 2/3, Mistral-style configs without sliding windows, TinyLlama,
SmolLM...) with Hugging Face checkpoint import: RMSNorm, rotary embeddings (`ember.models.rope`),
grouped-query attention, SwiGLU MLP, a tied or untied head and a KV cache.

The modules carry transformers' names (`model.layers.0.self_attn.q_proj`, `lm_head`, ...), so a
`model.safetensors` (or a sharded index) loads as it is and LoRA adapters share PEFT's keys. Attention
runs through `scaled_dot_product_attention` (the fused op where ember has it); keys and values are cached
with `num_key_value_heads` heads and repeated to the query heads at use.

Example:
    >>> model = LlamaForCausalLM.from_dir("TinyLlama-1.1B/")
    >>> model.generate([[1, 450, 4996]], max_new_tokens=5).shape
    (1, 8)
"""

from __future__ import annotations

import os
from pathlib import Path

from ..config import Config
from ..errors import ConfigError, ShapeError
from ..api.activation import silu
from ..nn.attention import KVCache, causal_mask, scaled_dot_product_attention
from ..nn.embedding import Embedding
from ..nn.linear import Linear
from ..nn.module import Module
from ..nn.norm import RMSNorm
from ..nn.positional import rotate_pairs
from ..tensor import Tensor
from .generate import CausalLM
from .hf import load_weights, read_config
from .rope import RopeAngles


class LlamaConfig(Config):
    """A Llama `config.json`'s fields under transformers' names (the others do not change the model)."""

    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    hidden_act: str = "silu"
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    attention_dropout: float = 0.0
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None
    rope_parameters: dict | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    @classmethod
    def from_hf(cls, path: str | os.PathLike) -> "LlamaConfig":
        """Read a checkpoint folder's (or a file's) `config.json`."""
        data = read_config(path, ("llama", "mistral"))
        if data.get("sliding_window") not in (None, 0) and data.get("model_type") == "mistral":
            raise ConfigError(f"{path}: sliding-window attention is not supported")
        names = set(cls.__dataclass_fields__)
        return cls.from_dict({k: v for k, v in data.items() if k in names})

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    def rope(self) -> RopeAngles:
        params = dict(self.rope_parameters or self.rope_scaling or {})
        params.setdefault("rope_theta", self.rope_theta)
        return RopeAngles(params, self.dim_per_head, self.max_position_embeddings)


def repeat_heads(x: Tensor, times: int) -> Tensor:
    """(B, Hkv, S, D) -> (B, Hkv * times, S, D), each head repeated `times` in place (GQA's sharing)."""
    if times == 1:
        return x
    b, h, s, d = x.shape
    return x.unsqueeze(2).expand(b, h, times, s, d).reshape(b, h * times, s, d)


def causal_attention(q: Tensor, k: Tensor, v: Tensor, dropout_p: float = 0.0) -> Tensor:
    """Attention of L new queries over S >= L keys, the queries being the last L positions."""
    length, keys = q.shape[-2], k.shape[-2]
    if length == 1:
        return scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
    if length == keys:
        return scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    allowed = ~causal_mask(length, keys, keys - length, q.device.inner)
    return scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=dropout_p)


class LlamaAttention(Module):
    """Grouped-query self-attention with rotary positions: `q_proj`, `k_proj`, `v_proj`, `o_proj`."""

    def __init__(self, config: LlamaConfig, device=None, dtype=None) -> None:
        heads, kv, d, width = config.num_attention_heads, config.kv_heads, config.dim_per_head, config.hidden_size
        if heads % kv:
            raise ConfigError(f"LlamaAttention: num_attention_heads {heads} is not a multiple of "
                              f"num_key_value_heads {kv}")
        bias = config.attention_bias
        self.q_proj = Linear(width, heads * d, bias, device, dtype)
        self.k_proj = Linear(width, kv * d, bias, device, dtype)
        self.v_proj = Linear(width, kv * d, bias, device, dtype)
        self.o_proj = Linear(heads * d, width, bias, device, dtype)
        self.heads, self.kv_heads, self.head_dim = heads, kv, d
        self.dropout = config.attention_dropout

    def forward(self, x: Tensor, angles, scaling: float, cache: KVCache | None = None) -> Tensor:
        batch, length, _ = x.shape
        q = self.q_proj(x).reshape(batch, length, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).reshape(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).reshape(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rotate_pairs(q, angles, scale=scaling), rotate_pairs(k, angles, scale=scaling)
        if cache is not None:
            k, v = cache.append(k, v)
        times = self.heads // self.kv_heads
        out = causal_attention(q, repeat_heads(k, times), repeat_heads(v, times),
                               self.dropout if self.training else 0.0)
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, self.heads * self.head_dim))


class LlamaMLP(Module):
    """SwiGLU: `down_proj(silu(gate_proj(x)) * up_proj(x))`."""

    def __init__(self, config: LlamaConfig, device=None, dtype=None) -> None:
        width, inner, bias = config.hidden_size, config.intermediate_size, config.mlp_bias
        self.gate_proj = Linear(width, inner, bias, device, dtype)
        self.up_proj = Linear(width, inner, bias, device, dtype)
        self.down_proj = Linear(inner, width, bias, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(Module):
    """Pre-norm block: `x + attn(norm(x))`, then `x + mlp(norm(x))`."""

    def __init__(self, config: LlamaConfig, device=None, dtype=None) -> None:
        self.self_attn = LlamaAttention(config, device, dtype)
        self.mlp = LlamaMLP(config, device, dtype)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, device=device, dtype=dtype)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, device=device, dtype=dtype)

    def forward(self, x: Tensor, angles, scaling: float, cache: KVCache | None = None) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), angles, scaling, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(Module):
    """`embed_tokens`, `layers`, `norm`: (B, L) ids to (B, L, hidden) states."""

    def __init__(self, config: LlamaConfig, device=None, dtype=None) -> None:
        if config.hidden_act != "silu":
            raise ConfigError(f"LlamaModel: hidden_act {config.hidden_act!r} is not supported ('silu')")
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size, device=device, dtype=dtype)
        self.layers = [LlamaDecoderLayer(config, device, dtype) for _ in range(config.num_hidden_layers)]
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, device=device, dtype=dtype)
        self._rope = config.rope()

    def forward(self, input_ids: Tensor, cache: list[KVCache] | None = None) -> Tensor:
        if input_ids.ndim != 2:
            raise ShapeError("LlamaModel", f"input_ids must be (batch, length), got {input_ids.shape}")
        offset = len(cache[0]) if cache else 0
        angles = self._rope.angles(offset, input_ids.shape[1], input_ids.device.inner)
        x = self.embed_tokens(input_ids)
        for i, layer in enumerate(self.layers):
            x = layer(x, angles, self._rope.scaling, cache[i] if cache is not None else None)
        return self.norm(x)


class LlamaForCausalLM(CausalLM):
    """`model` (a `LlamaModel`) and `lm_head` (None when tied to `model.embed_tokens`): ids to logits.

    `forward(input_ids, cache=None)` returns (B, L, vocab) logits; `generate` is `CausalLM.generate`.
    `from_dir` loads a Hugging Face folder (config.json, weights, tokenizer.json when present).
    """

    def __init__(self, config: LlamaConfig, device=None, dtype=None) -> None:
        self.config = config
        self.model = LlamaModel(config, device, dtype)
        self.lm_head = None if config.tie_word_embeddings else \
            Linear(config.hidden_size, config.vocab_size, False, device, dtype)

    @classmethod
    def from_dir(cls, path: str | os.PathLike, device=None, dtype=None) -> "LlamaForCausalLM":
        path = Path(path)
        model = cls(LlamaConfig.from_hf(path), device, dtype)
        state = load_weights(path)
        if model.lm_head is None:
            state.pop("lm_head.weight", None)  # a tied head saved anyway
        return model.loaded({k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}, path)

    def parts(self):
        return self.model, self.model.layers, self.model.embed_tokens
