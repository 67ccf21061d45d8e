"""Transformer blocks, batch first: `PositionWiseFeedForward`, encoder and decoder layers (post-norm as in
"Attention is all you need", or pre-norm), and their stacks `TransformerEncoder`/`TransformerDecoder`.

Names, layouts and equations follow PyTorch's `nn.Transformer*`, so weights port one to one (the
"pytorch" adapter of `ember.store.load_module` renames the few parts ember names differently). A
decoder decodes incrementally with a `DecoderCache` per layer (`new_cache()`).

Example:
    >>> enc = TransformerEncoder(d_model=16, n_heads=4, d_ff=32, num_layers=2)
    >>> enc(ember.randn(2, 5, 16)).shape
    (2, 5, 16)
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from ..api import activation as act
from ..errors import ShapeError
from ..tensor import Tensor
from .attention import KVCache, MultiHeadAttention
from .dropout import dropout
from .linear import Linear
from .module import Module
from .norm import LayerNorm

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": act.relu, "gelu": act.gelu}


def _activation(name_or_fn) -> Callable[[Tensor], Tensor]:
    if callable(name_or_fn):
        return name_or_fn
    if name_or_fn not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name_or_fn!r}; known: {sorted(ACTIVATIONS)} or a callable")
    return ACTIVATIONS[name_or_fn]


class _Dropping(Module):
    """A module with a dropout probability applied only in training mode."""

    dropout: float = 0.0

    def _drop(self, x: Tensor) -> Tensor:
        return dropout(x, self.dropout, self.training)


class PositionWiseFeedForward(_Dropping):
    """`linear_outer(dropout(act(linear_inner(x))))`, applied to each position alike.

    Args:
        d_model: input and output width.
        d_ff: hidden width.
        dropout: probability of dropping hidden activations in training mode.
        activation: "relu", "gelu" (exact, erf) or a callable.
        bias: whether both linears have biases.

    Example:
        >>> PositionWiseFeedForward(8, 32)(ember.randn(2, 5, 8)).shape
        (2, 5, 8)
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation="relu", bias: bool = True,
                 device=None, dtype=None) -> None:
        self.linear_inner = Linear(d_model, d_ff, bias, device, dtype)
        self.linear_outer = Linear(d_ff, d_model, bias, device, dtype)
        self.dropout = dropout
        self.activation = _activation(activation)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear_outer(self._drop(self.activation(self.linear_inner(x))))

    def extra_repr(self) -> str:
        return f"activation={getattr(self.activation, '__name__', self.activation)}, dropout={self.dropout}"


class TransformerEncoderLayer(_Dropping):
    """Self-attention then feed-forward, each in a residual branch with dropout and LayerNorm.

        post-norm:  x = norm1(x + drop(SA(x)));          x = norm2(x + drop(FF(x)))
        pre-norm:   x = x + drop(SA(norm1(x)));          x = x + drop(FF(norm2(x)))

    Args:
        d_model: model width; n_heads: attention heads; d_ff: feed-forward hidden width.
        dropout: used on attention weights, inside the feed-forward and on each branch (training only).
        activation: of the feed-forward ("relu", "gelu" or a callable).
        norm_first: pre-norm (True) or post-norm (False, the original transformer).
        layer_norm_eps: LayerNorm's epsilon; bias: biases in all linears and norms.
    `forward(x, src_mask=None, src_key_padding_mask=None, is_causal=False)` with masks as in
    `MultiHeadAttention` (bool True = blocked).

    Example:
        >>> TransformerEncoderLayer(16, 4, 32, norm_first=True)(ember.randn(2, 5, 16)).shape
        (2, 5, 16)
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int = 2048, dropout: float = 0.1, activation="relu",
                 norm_first: bool = False, layer_norm_eps: float = 1e-5, bias: bool = True,
                 device=None, dtype=None) -> None:
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout, bias, device=device, dtype=dtype)
        self.ff = PositionWiseFeedForward(d_model, d_ff, dropout, activation, bias, device, dtype)
        self.norm1 = LayerNorm(d_model, layer_norm_eps, bias=bias, device=device, dtype=dtype)
        self.norm2 = LayerNorm(d_model, layer_norm_eps, bias=bias, device=device, dtype=dtype)
        self.dropout, self.norm_first = dropout, norm_first

    def forward(self, x: Tensor, src_mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                is_causal: bool = False) -> Tensor:
        def attend(y: Tensor) -> Tensor:
            return self._drop(self.self_attn(y, attn_mask=src_mask, key_padding_mask=src_key_padding_mask,
                                             is_causal=is_causal))

        if self.norm_first:
            x = x + attend(self.norm1(x))
            return x + self._drop(self.ff(self.norm2(x)))
        x = self.norm1(x + attend(x))
        return self.norm2(x + self._drop(self.ff(x)))

    def extra_repr(self) -> str:
        return f"norm_first={self.norm_first}, dropout={self.dropout}"


class DecoderCache(NamedTuple):
    """What one decoder layer keeps between decoding steps: the self-attention keys and values so far,
    and the cross-attention keys and values of the memory (computed on the first step)."""

    self_attn: KVCache
    cross_attn: KVCache

    @classmethod
    def empty(cls) -> "DecoderCache":
        return cls(KVCache(), KVCache(static=True))


class TransformerDecoderLayer(_Dropping):
    """Masked self-attention, cross-attention to `memory`, then feed-forward, each a residual branch.

        post-norm:  x = norm1(x + drop(SA(x)));  x = norm2(x + drop(CA(x, m)));  x = norm3(x + drop(FF(x)))
        pre-norm:   x = x + drop(SA(norm1(x)));  x = x + drop(CA(norm2(x), m));  x = x + drop(FF(norm3(x)))

    Args: as `TransformerEncoderLayer`.
    `forward(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
    tgt_is_causal, cache)`: masks as in `MultiHeadAttention`; with a `DecoderCache`, `x` holds only the
    new positions, self-attention also sees the cached ones, and the memory's projections are reused.

    Example:
        >>> layer = TransformerDecoderLayer(16, 4, 32)
        >>> layer(ember.randn(2, 3, 16), ember.randn(2, 7, 16), tgt_is_causal=True).shape
        (2, 3, 16)
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int = 2048, dropout: float = 0.1, activation="relu",
                 norm_first: bool = False, layer_norm_eps: float = 1e-5, bias: bool = True,
                 device=None, dtype=None) -> None:
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout, bias, device=device, dtype=dtype)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout, bias, device=device, dtype=dtype)
        self.ff = PositionWiseFeedForward(d_model, d_ff, dropout, activation, bias, device, dtype)
        self.norm1 = LayerNorm(d_model, layer_norm_eps, bias=bias, device=device, dtype=dtype)
        self.norm2 = LayerNorm(d_model, layer_norm_eps, bias=bias, device=device, dtype=dtype)
        self.norm3 = LayerNorm(d_model, layer_norm_eps, bias=bias, device=device, dtype=dtype)
        self.dropout, self.norm_first = dropout, norm_first

    def forward(self, x: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None, tgt_is_causal: bool = False,
                cache: DecoderCache | None = None) -> Tensor:
        def attend_self(y: Tensor) -> Tensor:
            return self._drop(self.self_attn(y, attn_mask=tgt_mask, key_padding_mask=tgt_key_padding_mask,
                                             is_causal=tgt_is_causal, cache=None if cache is None else cache.self_attn))

        def attend_memory(y: Tensor) -> Tensor:
            return self._drop(self.cross_attn(y, memory, memory, attn_mask=memory_mask,
                                              key_padding_mask=memory_key_padding_mask,
                                              cache=None if cache is None else cache.cross_attn))

        if self.norm_first:
            x = x + attend_self(self.norm1(x))
            x = x + attend_memory(self.norm2(x))
            return x + self._drop(self.ff(self.norm3(x)))
        x = self.norm1(x + attend_self(x))
        x = self.norm2(x + attend_memory(x))
        return self.norm3(x + self._drop(self.ff(x)))

    def extra_repr(self) -> str:
        return f"norm_first={self.norm_first}, dropout={self.dropout}"


class TransformerEncoder(Module):
    """`num_layers` `TransformerEncoderLayer`s (independent weights), then an optional final LayerNorm
    (usual with pre-norm layers).

    Args: those of `TransformerEncoderLayer`, plus `num_layers` and `final_norm`.
    `forward(x, src_mask=None, src_key_padding_mask=None, is_causal=False)`.

    Example:
        >>> enc = TransformerEncoder(16, 4, 32, num_layers=2, norm_first=True, final_norm=True)
        >>> enc(ember.randn(2, 5, 16)).shape
        (2, 5, 16)
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int = 2048, num_layers: int = 6, dropout: float = 0.1,
                 activation="relu", norm_first: bool = False, layer_norm_eps: float = 1e-5, bias: bool = True,
                 final_norm: bool = False, device=None, dtype=None) -> None:
        if num_layers <= 0:
            raise ValueError(f"TransformerEncoder: num_layers must be positive, got {num_layers}")
        self.layers = [TransformerEncoderLayer(d_model, n_heads, d_ff, dropout, activation, norm_first,
                                               layer_norm_eps, bias, device, dtype) for _ in range(num_layers)]
        self.norm = LayerNorm(d_model, layer_norm_eps, bias=bias, device=device, dtype=dtype) if final_norm else None

    def forward(self, x: Tensor, src_mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                is_causal: bool = False) -> Tensor:
        for layer in self.layers:
            x = layer(x, src_mask, src_key_padding_mask, is_causal)
        return self.norm(x) if self.norm is not None else x


class TransformerDecoder(Module):
    """`num_layers` `TransformerDecoderLayer`s, then an optional final LayerNorm.

    Args: those of `TransformerDecoderLayer`, plus `num_layers` and `final_norm`.
    `forward(x, memory, ..., cache=None)` takes the decoder layer's arguments; `cache` is the list from
    `new_cache()` (one `DecoderCache` per layer) for incremental decoding over one fixed memory.

    Example:
        >>> dec = TransformerDecoder(16, 4, 32, num_layers=2)
        >>> cache, memory = dec.new_cache(), ember.randn(1, 7, 16)
        >>> y1 = dec(ember.randn(1, 1, 16), memory, tgt_is_causal=True, cache=cache)  # step 1
        >>> y2 = dec(ember.randn(1, 1, 16), memory, tgt_is_causal=True, cache=cache)  # step 2
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int = 2048, num_layers: int = 6, dropout: float = 0.1,
                 activation="relu", norm_first: bool = False, layer_norm_eps: float = 1e-5, bias: bool = True,
                 final_norm: bool = False, device=None, dtype=None) -> None:
        if num_layers <= 0:
            raise ValueError(f"TransformerDecoder: num_layers must be positive, got {num_layers}")
        self.layers = [TransformerDecoderLayer(d_model, n_heads, d_ff, dropout, activation, norm_first,
                                               layer_norm_eps, bias, device, dtype) for _ in range(num_layers)]
        self.norm = LayerNorm(d_model, layer_norm_eps, bias=bias, device=device, dtype=dtype) if final_norm else None

    def new_cache(self) -> list[DecoderCache]:
        """One empty `DecoderCache` per layer, to pass as `cache=` step after step."""
        return [DecoderCache.empty() for _ in self.layers]

    def forward(self, x: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None, tgt_is_causal: bool = False,
                cache: list[DecoderCache] | None = None) -> Tensor:
        if cache is not None and len(cache) != len(self.layers):
            raise ShapeError("TransformerDecoder", f"cache has {len(cache)} entries for {len(self.layers)} layers; "
                                                   "make it with new_cache()")
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                      tgt_is_causal, None if cache is None else cache[i])
        return self.norm(x) if self.norm is not None else x
