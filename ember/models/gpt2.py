"""GPT-2 (Radford et al. 2019) with Hugging Face checkpoint import: learned positions, pre-norm blocks of
causal attention and a GELU (tanh) MLP, the head tied to the token embedding, a KV cache.

Modules carry transformers' names (`transformer.h.0.attn.c_attn`, ...). transformers keeps GPT-2's
projections as `Conv1D` with (in, out) weights; ember's are `Linear`s with PyTorch's (out, in), so
those weights are transposed on load (LoRA adapters have the same shapes either way, PEFT's too).

Example:
    >>> model = GPT2LMHeadModel.from_dir("gpt2/")
    >>> model.generate([[464, 3290]], max_new_tokens=4).shape
    (1, 6)
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from ..api.activation import gelu
from ..api.creation import arange
from ..config import Config
from ..errors import ConfigError, ShapeError
from ..nn.attention import KVCache
from ..nn.dropout import dropout
from ..nn.embedding import Embedding
from ..nn.linear import Linear
from ..nn.module import Module
from ..nn.norm import LayerNorm
from ..tensor import Tensor
from .generate import CausalLM
from .hf import load_weights, read_config
from .llama import causal_attention

_CONV1D = re.compile(r"\.(c_attn|c_proj|c_fc)\.weight$")


class GPT2Config(Config):
    """A GPT-2 `config.json`'s fields under transformers' names."""

    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_inner: int | None = None
    activation_function: str = "gelu_new"
    layer_norm_epsilon: float = 1e-5
    resid_pdrop: float = 0.1
    embd_pdrop: float = 0.1
    attn_pdrop: float = 0.1
    scale_attn_weights: bool = True
    scale_attn_by_inverse_layer_idx: bool = False
    tie_word_embeddings: bool = True
    bos_token_id: int | None = None
    eos_token_id: int | None = None

    @classmethod
    def from_hf(cls, path: str | os.PathLike) -> "GPT2Config":
        data = read_config(path, ("gpt2",))
        names = set(cls.__dataclass_fields__)
        return cls.from_dict({k: v for k, v in data.items() if k in names})


_ACTIVATIONS = {"gelu_new": lambda x: gelu(x, approximate="tanh"), "gelu_pytorch_tanh": lambda x: gelu(x, approximate="tanh"),
                "gelu": gelu, "relu": lambda x: x.relu()}


class GPT2Attention(Module):
    """`c_attn` (packed q, k, v) and `c_proj`, causal."""

    def __init__(self, config: GPT2Config, device=None, dtype=None) -> None:
        if config.n_embd % config.n_head:
            raise ConfigError(f"GPT2Attention: n_embd {config.n_embd} is not a multiple of n_head {config.n_head}")
        if not config.scale_attn_weights or config.scale_attn_by_inverse_layer_idx:
            raise ConfigError("GPT2Attention: only scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False")
        self.c_attn = Linear(config.n_embd, 3 * config.n_embd, device=device, dtype=dtype)
        self.c_proj = Linear(config.n_embd, config.n_embd, device=device, dtype=dtype)
        self.heads, self.width = config.n_head, config.n_embd
        self.attn_dropout, self.resid_dropout = config.attn_pdrop, config.resid_pdrop

    def forward(self, x: Tensor, cache: KVCache | None = None) -> Tensor:
        batch, length, _ = x.shape
        q, k, v = (t.reshape(batch, length, self.heads, self.width // self.heads).transpose(1, 2)
                   for t in self.c_attn(x).chunk(3, dim=-1))
        if cache is not None:
            k, v = cache.append(k, v)
        out = causal_attention(q, k, v, self.attn_dropout if self.training else 0.0)
        out = self.c_proj(out.transpose(1, 2).reshape(batch, length, self.width))
        return dropout(out, self.resid_dropout, self.training)


class GPT2MLP(Module):
    """`c_proj(act(c_fc(x)))`, act GELU with the tanh formula (transformers' "gelu_new")."""

    def __init__(self, config: GPT2Config, device=None, dtype=None) -> None:
        if config.activation_function not in _ACTIVATIONS:
            raise ConfigError(f"GPT2MLP: activation_function {config.activation_function!r} is not one of "
                              f"{list(_ACTIVATIONS)}")
        inner = config.n_inner or 4 * config.n_embd
        self.c_fc = Linear(config.n_embd, inner, device=device, dtype=dtype)
        self.c_proj = Linear(inner, config.n_embd, device=device, dtype=dtype)
        self.act, self.dropout = config.activation_function, config.resid_pdrop

    def forward(self, x: Tensor) -> Tensor:
        return dropout(self.c_proj(_ACTIVATIONS[self.act](self.c_fc(x))), self.dropout, self.training)


class GPT2Block(Module):
    """`x + attn(ln_1(x))`, then `x + mlp(ln_2(x))`."""

    def __init__(self, config: GPT2Config, device=None, dtype=None) -> None:
        eps = config.layer_norm_epsilon
        self.ln_1 = LayerNorm(config.n_embd, eps, device=device, dtype=dtype)
        self.attn = GPT2Attention(config, device, dtype)
        self.ln_2 = LayerNorm(config.n_embd, eps, device=device, dtype=dtype)
        self.mlp = GPT2MLP(config, device, dtype)

    def forward(self, x: Tensor, cache: KVCache | None = None) -> Tensor:
        x = x + self.attn(self.ln_1(x), cache)
        return x + self.mlp(self.ln_2(x))


class GPT2Model(Module):
    """`wte`, `wpe`, the blocks `h` and `ln_f`: (B, L) ids to (B, L, n_embd) states."""

    def __init__(self, config: GPT2Config, device=None, dtype=None) -> None:
        self.wte = Embedding(config.vocab_size, config.n_embd, device=device, dtype=dtype)
        self.wpe = Embedding(config.n_positions, config.n_embd, device=device, dtype=dtype)
        self.h = [GPT2Block(config, device, dtype) for _ in range(config.n_layer)]
        self.ln_f = LayerNorm(config.n_embd, config.layer_norm_epsilon, device=device, dtype=dtype)
        self.dropout = config.embd_pdrop

    def forward(self, input_ids: Tensor, cache: list[KVCache] | None = None) -> Tensor:
        if input_ids.ndim != 2:
            raise ShapeError("GPT2Model", f"input_ids must be (batch, length), got {input_ids.shape}")
        offset, length = (len(cache[0]) if cache else 0), input_ids.shape[1]
        if offset + length > self.wpe.num_embeddings:
            raise ShapeError("GPT2Model", f"{offset + length} positions; the model has {self.wpe.num_embeddings}")
        positions = arange(offset, offset + length, device=self.wpe.weight.device.inner)
        x = dropout(self.wte(input_ids) + self.wpe(positions), self.dropout, self.training)
        for i, block in enumerate(self.h):
            x = block(x, cache[i] if cache is not None else None)
        return self.ln_f(x)


class GPT2LMHeadModel(CausalLM):
    """`transformer` (a `GPT2Model`) and `lm_head` (None when tied to `transformer.wte`, GPT-2's default).

    `forward(input_ids, cache=None)` returns (B, L, vocab) logits; `from_dir` loads a Hugging Face folder.
    """

    def __init__(self, config: GPT2Config, device=None, dtype=None) -> None:
        self.config = config
        self.transformer = GPT2Model(config, device, dtype)
        self.lm_head = None if config.tie_word_embeddings else \
            Linear(config.n_embd, config.vocab_size, False, device, dtype)

    @classmethod
    def from_dir(cls, path: str | os.PathLike, device=None, dtype=None) -> "GPT2LMHeadModel":
        path = Path(path)
        model = cls(GPT2Config.from_hf(path), device, dtype)
        state = {}
        for key, value in load_weights(path).items():
            key = key if key.startswith(("transformer.", "lm_head.")) else "transformer." + key
            if key.endswith((".attn.bias", ".attn.masked_bias")) or (key == "lm_head.weight" and model.lm_head is None):
                continue  # transformers' causal-mask buffers; a tied head saved anyway
            state[key] = np.ascontiguousarray(value.T) if _CONV1D.search(key) else value
        return model.loaded(state, path)

    def parts(self):
        return self.transformer, self.transformer.h, self.transformer.wte
