"""The torch peers of the transformer workloads (bench/gpt.py, bench/training.py), written the way a torch
user writes them for speed, and the copy of an ember model's weights into them.

nanoGPT's block: one `Linear` for q, k and v, attention through `F.scaled_dot_product_attention` with
`is_causal=True` (GPT) or no mask (encoder, BERT) and no dropout, so CUDA takes its fused kernels (flash for
f16/bf16; the memory-efficient kernel for f32, which these workloads run) and never builds a mask or an
L x L score matrix; then LayerNorm and a GELU (GPT, BERT) or ReLU (encoder) MLP. The layers, widths, biases,
norm placement and tied GPT head are ember's bench models' (bench/models.py), with the same parameter
count; module names follow ember's so `load_ember` maps one to the other.

Example:
    >>> gpt = GPT(vocab=64, seq=8, d_model=16, heads=2, layers=1)
    >>> gpt(torch.zeros(2, 8, dtype=torch.long)).shape
    torch.Size([2, 8, 64])
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu}  # F.gelu is the exact (erf) GELU, ember's "gelu"


class SelfAttention(nn.Module):
    """Multi-head self-attention: q, k, v from one Linear (`qkv`), SDPA, the `output` Linear."""

    def __init__(self, d_model: int, heads: int, causal: bool) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.output = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = (y.view(batch, length, self.heads, width // self.heads).transpose(1, 2)
                   for y in self.qkv(x).split(width, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.output(y.transpose(1, 2).reshape(batch, length, width))


class FeedForward(nn.Module):
    """`linear_outer(activation(linear_inner(x)))`."""

    def __init__(self, d_model: int, d_ff: int, activation: str) -> None:
        super().__init__()
        self.linear_inner, self.linear_outer = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_outer(self.activation(self.linear_inner(x)))


class Block(nn.Module):
    """A transformer layer: pre-norm `x + SA(norm1(x))`, `x + FF(norm2(x))`, or post-norm
    `norm1(x + SA(x))`, `norm2(x + FF(x))` (ember's `TransformerEncoderLayer`, torch's with norm_first)."""

    def __init__(self, d_model: int, heads: int, d_ff: int, activation: str, norm_first: bool,
                 causal: bool) -> None:
        super().__init__()
        self.self_attn = SelfAttention(d_model, heads, causal)
        self.ff = FeedForward(d_model, d_ff, activation)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.norm_first = norm_first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x))
            return x + self.ff(self.norm2(x))
        x = self.norm1(x + self.self_attn(x))
        return self.norm2(x + self.ff(x))


class Encoder(nn.Module):
    """ember's `TransformerEncoder` defaults: post-norm layers (ReLU unless `activation`), no mask, no final
    norm."""

    def __init__(self, d_model: int, heads: int, d_ff: int, layers: int, activation: str = "relu") -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block(d_model, heads, d_ff, activation, norm_first=False, causal=False)
                                    for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class GPT(nn.Module):
    """Token and learned position embeddings (N(0, 0.02), nanoGPT's), pre-norm causal GELU blocks with
    d_ff = 4 d_model, a final LayerNorm and the head tied to the token embedding; returns the logits."""

    def __init__(self, vocab: int, seq: int, d_model: int, heads: int, layers: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(seq, d_model)
        for embedding in (self.tok, self.pos):
            nn.init.normal_(embedding.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(d_model, heads, 4 * d_model, "gelu", norm_first=True, causal=True)
                                    for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return F.linear(self.norm(x), self.tok.weight)


class BERT(nn.Module):
    """Token and learned position embeddings, their LayerNorm, post-norm GELU blocks (d_ff = 4 d_model),
    unmasked: `models.ember_bert`; returns the last hidden states."""

    def __init__(self, vocab: int, seq: int, d_model: int, heads: int, layers: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(seq, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.encoder = Encoder(d_model, heads, 4 * d_model, layers, activation="gelu")

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.norm(self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))))


def check_fused_attention(model: nn.Module, *inputs: torch.Tensor) -> None:
    """Run `model(*inputs)` once without grad with SDPA restricted to its fused kernels (flash and
    memory-efficient): torch raises "No available kernel" where the peer would take its slow math path.

    Example:
        >>> check_fused_attention(GPT(64, 8, 16, 2, 1), torch.zeros(2, 8, dtype=torch.long))
    """
    with torch.no_grad(), sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        model(*inputs)


def load_ember(peer: nn.Module, model) -> None:
    """Set `peer`'s parameters to ember `model`'s (the same architecture, bench/models.py), so both compute
    the same function; a name or shape that does not match raises torch's `load_state_dict` error.

    Example:
        >>> load_ember(Encoder(16, 2, 32, 1), TransformerEncoder(16, 2, 32, num_layers=1, dropout=0.0))
    """
    peer.load_state_dict({name: torch.tensor(value) for name, value in torch_state(model).items()}, strict=True)


def torch_state(model) -> dict[str, np.ndarray]:
    """ember `model`'s parameters under the torch peer's names and layouts: each Linear's weight through
    `torch_linear_weight`, and a self-attention's query, key and value merged into its `qkv` Linear."""
    from ember.nn import Linear
    linears = {name for name, module in model.named_modules() if isinstance(module, Linear)}
    state = {}
    for name, param in model.named_parameters():
        owner, _, kind = name.rpartition(".")
        value = param.numpy()
        state[name] = torch_linear_weight(value) if kind == "weight" and owner in linears else value
    for name in [n for n in state if ".query." in n]:
        prefix, _, kind = name.partition(".query.")
        state[f"{prefix}.qkv.{kind}"] = np.concatenate([state.pop(f"{prefix}.{p}.{kind}")
                                                        for p in ("query", "key", "value")])
    return state


def torch_linear_weight(weight: np.ndarray) -> np.ndarray:
    """An ember `Linear`'s weight in torch's (out, in) layout: the one place that knows ember's layout,
    read from ember itself ((in, out) is transposed, (out, in) kept)."""
    return weight if _ember_linear_is_out_in() else weight.T


def _ember_linear_is_out_in() -> bool:
    import ember
    from ember.nn import Linear
    return tuple(Linear(2, 3, device=ember.Device.numpy()).weight.shape) == (3, 2)
