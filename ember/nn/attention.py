"""Attention: the functional `scaled_dot_product_attention`, `MultiHeadAttention` and its `KVCache`.

Mask conventions follow PyTorch, name by name, so code ported from it keeps its meaning:
- `scaled_dot_product_attention(attn_mask=bool)`: True means the query MAY attend to that key.
- `MultiHeadAttention(attn_mask=bool, key_padding_mask=bool)`: True means the key is BLOCKED.
- A float mask is added to the scores in both (use -inf to block).

Example:
    >>> mha = MultiHeadAttention(d_model=16, n_heads=4)
    >>> x = ember.randn(2, 5, 16)
    >>> mha(x, is_causal=True).shape
    (2, 5, 16)
"""

from __future__ import annotations

import math

import numpy as np

from .. import amp
from ..api.creation import arange, from_numpy
from ..api.shape import cat
from ..errors import DTypeError, ShapeError
from ..extension import cube_target
from ..tensor import Tensor
from . import init
from .dropout import dropout
from .linear import Linear
from .module import Module
from ..kernels.attention import shared_bytes
from .fused_attention import MAX_DIM, attention


def causal_mask(queries: int, keys: int, offset: int = 0, device=None) -> Tensor:
    """A bool (queries, keys) mask, True where query i may NOT see key j, i.e. where j > i + offset.

    Args:
        queries: number of query positions.
        keys: number of key positions.
        offset: the absolute position of query 0 (the number of keys before it, e.g. cached ones);
            `offset=0` is PyTorch's top-left alignment, `offset=keys - queries` the bottom-right one
            that incremental decoding needs.

    Example:
        >>> causal_mask(2, 3, offset=1).tolist()
        [[False, False, True], [False, False, False]]
    """
    if type(queries) is not int or type(keys) is not int:
        # traced sizes (ONNX export): compared positions, so the mask follows the sizes of the graph
        rows = arange(queries, device=device).unsqueeze(1)
        return arange(keys, device=device).unsqueeze(0) > (rows + offset if offset else rows)
    blocked = np.triu(np.ones((queries, keys), dtype=bool), k=1 + offset)
    return from_numpy(blocked, device)


def attention_weights(query: Tensor, key: Tensor, blocked: Tensor | None = None, bias: Tensor | None = None,
                      scale: float | None = None) -> Tensor:
    """`softmax(query @ key^T * scale + bias)`, with blocked scores set to -inf first.

    Args:
        query: (..., L, E).
        key: (..., S, E).
        blocked: bool, broadcastable to (..., L, S); True where the query may not attend.
        bias: float, broadcastable to (..., L, S); added to the scores.
        scale: the score factor, `1 / sqrt(E)` by default.
    Returns the (..., L, S) attention probabilities. A query whose keys are all blocked gets all-zero
    weights (so its output is zero), as in PyTorch's `scaled_dot_product_attention`, and finite gradients.

    Example:
        >>> attention_weights(ember.randn(1, 2, 4), ember.randn(1, 3, 4)).shape
        (1, 2, 3)
    """
    if query.shape[-1] != key.shape[-1]:
        raise ShapeError("attention", f"query {query.shape} and key {key.shape} differ in their last dim")
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = (query @ key.transpose(-2, -1)) * scale
    if bias is not None:
        scores = scores + bias
    if blocked is not None:
        scores = scores.masked_fill(blocked, float("-inf"))
    # A softmax that tolerates rows of -inf: their shift is 0 and their sum 1, so they come out zero.
    shift = scores.amax(dim=-1, keepdim=True).detach()
    shift = shift.masked_fill(shift.isinf(), 0)
    e = (scores - shift).exp()
    total = e.sum(dim=-1, keepdim=True)
    return e / total.masked_fill(total == 0, 1)


@amp.lower_precision
def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None) -> Tensor:
    """`softmax(Q K^T * scale + M) V`, PyTorch's `F.scaled_dot_product_attention`.

    Args:
        query: (..., L, E); key: (..., S, E); value: (..., S, Ev).
        attn_mask: bool (True = may attend) or float (added to the scores), broadcastable to (..., L, S).
        dropout_p: probability of dropping an attention weight (applied whenever > 0, as in PyTorch;
            modules pass 0 in eval mode).
        is_causal: block key j for query i when j > i (top-left aligned, PyTorch's convention).
        scale: the score factor, `1 / sqrt(E)` by default.
    Returns (..., L, Ev). Without a mask or dropout, for operands and devices `fusable` accepts, it runs the
    fused flash-style op (`ember.nn.fused_attention`), which keeps no L x S matrix for backward.

    Example:
        >>> q = k = v = ember.randn(2, 4, 5, 8)
        >>> scaled_dot_product_attention(q, k, v, is_causal=True).shape
        (2, 4, 5, 8)
    """
    if dropout_p == 0 and attn_mask is None and fusable(query, key, value):
        return attention(query, key, value, scale=scale, causal=is_causal)[0]
    blocked, bias = _split_mask(attn_mask, allowed_when_true=True)
    if is_causal:
        causal = causal_mask(query.shape[-2], key.shape[-2], 0, query.device.inner)
        blocked = causal if blocked is None else blocked | causal
    if key.shape[-2] != value.shape[-2]:
        raise ShapeError("attention", f"key {key.shape} and value {value.shape} differ in length")
    weights = attention_weights(query, key, blocked, bias, scale)
    if dropout_p > 0:
        weights = dropout(weights, dropout_p)
    return weights @ value


# Score elements (batch * heads * L * S) from which the C target takes the fused op: below, the composed
# path's BLAS matmuls are faster there (bench/attention.py); above, its L x S matrices cost too much memory.
CPU_FUSED_MIN_SCORES = 1 << 24
WEBGPU_SHARED_BYTES = 16384  # the workgroup memory every WebGPU adapter offers


def fusable(query: Tensor, key: Tensor, value: Tensor) -> bool:
    """Whether to run the fused attention op (`ember.nn.fused_attention`) on these operands: one float dtype,
    equal batch dims, head widths up to its `MAX_DIM`, on a device with a GPU cube target (CUDA; wgpu while
    the kernels' shared memory fits WebGPU's guaranteed 16 KiB),
    or on the C target once the score matrices reach `CPU_FUSED_MIN_SCORES` elements. Other operands,
    and the NumPy device, take the composed path.

    Example:
        >>> x = ember.randn(2, 5, 8, device=ember.Device.wgpu())
        >>> fusable(x, x, x), fusable(x.to(ember.Device.numpy()), x, x)
        (True, False)
    """
    if not (query.ndim >= 2 and query.ndim == key.ndim == value.ndim and query.dtype.is_float
            and query.dtype is key.dtype is value.dtype and query.shape[:-2] == key.shape[:-2] == value.shape[:-2]
            and key.shape[-2] == value.shape[-2] and query.shape[-1] == key.shape[-1]
            and max(query.shape[-1], value.shape[-1]) <= MAX_DIM):
        return False
    target = cube_target(query.device)
    if target == "cpu":
        return math.prod(query.shape[:-1]) * key.shape[-2] >= CPU_FUSED_MIN_SCORES
    if target == "wgsl":  # WebGPU guarantees 16 KiB of workgroup memory (wider heads: the composed path)
        return shared_bytes(query.shape[-1], value.shape[-1], query.dtype.np) <= WEBGPU_SHARED_BYTES
    return target is not None


def _split_mask(mask: Tensor | None, allowed_when_true: bool) -> tuple[Tensor | None, Tensor | None]:
    """A user mask as (blocked bool mask, additive float mask), one of them None."""
    if mask is None:
        return None, None
    if not isinstance(mask, Tensor):
        raise TypeError(f"attention masks must be tensors, got {type(mask).__name__}")
    if mask.dtype.is_bool:
        return (~mask if allowed_when_true else mask), None
    if mask.dtype.is_float:
        return None, mask
    raise DTypeError(f"attention masks must be bool or float, got {mask.dtype}")


class KVCache:
    """The keys and values a `MultiHeadAttention` has seen so far, for incremental decoding.

    Each call with `cache=` appends the new (B, H, T, Dh) keys and values and attends over all of
    them; causal masking then aligns the new queries to the end of the cache (query i sits at absolute
    position `len(cache) + i`). One cache serves one attention layer.

    Args:
        static: for attention to a fixed memory (a decoder's cross-attention): the first call fills the
            cache and later calls reuse its keys and values, skipping their projections (`clear()` it
            when the memory changes).

    Example:
        >>> cache = KVCache()
        >>> for t in range(5):
        ...     y = mha(x[:, t:t + 1], is_causal=True, cache=cache)
        >>> len(cache)
        5
    """

    def __init__(self, static: bool = False) -> None:
        self.static = static
        self.keys: Tensor | None = None
        self.values: Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.keys is None else self.keys.shape[-2]

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Add (B, H, T, Dh) keys and values; returns all keys and values so far."""
        if self.keys is not None:
            if keys.shape[:2] != self.keys.shape[:2] or keys.shape[-1] != self.keys.shape[-1]:
                raise ShapeError("KVCache.append", f"new keys {keys.shape} do not extend cached {self.keys.shape}")
            keys = cat([self.keys, keys], dim=-2)
            values = cat([self.values, values], dim=-2)
        self.keys, self.values = keys, values
        return keys, values

    def clear(self) -> None:
        """Forget everything (start a new sequence)."""
        self.keys = self.values = None


class MultiHeadAttention(Module):
    """Multi-head attention, batch first: `concat_h(softmax(Q_h K_h^T / sqrt(d) + M) V_h) W_o^T + b_o`.

    Args:
        d_model: model width E (split into `n_heads` heads of width d = E / n_heads).
        n_heads: number of heads.
        dropout: probability of dropping attention weights in training mode.
        bias: whether the four projections have biases.
        kdim, vdim: widths of the key and value inputs (default `d_model`).
    With Q = query @ W_q^T + b_q, K = key @ W_k^T + b_k, V = value @ W_v^T + b_v, each W stored as
    (out, in) like `Linear`: PyTorch's packed `in_proj_weight` (3 * d_model, d_model) is [W_q; W_k; W_v]
    stacked by rows. The Q/K/V weights are Glorot-uniform as in PyTorch: over the packed
    in-projection (fan_out = 3 * d_model), or each over its own fans when kdim or vdim differ from
    d_model (PyTorch's separate `q_proj_weight`, `k_proj_weight`, `v_proj_weight`); biases start at
    zero, as in PyTorch.

    Example:
        >>> mha = MultiHeadAttention(16, 4)
        >>> q, kv = ember.randn(2, 3, 16), ember.randn(2, 7, 16)
        >>> mha(q, kv, kv).shape
        (2, 3, 16)
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True,
                 kdim: int | None = None, vdim: int | None = None, device=None, dtype=None) -> None:
        if n_heads <= 0 or d_model % n_heads:
            raise ShapeError("MultiHeadAttention", f"d_model={d_model} is not divisible by n_heads={n_heads}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"MultiHeadAttention: dropout must be in [0, 1), got {dropout}")
        self.d_model, self.n_heads, self.dropout = d_model, n_heads, dropout
        self.query = Linear(d_model, d_model, bias, device, dtype)
        self.key = Linear(kdim or d_model, d_model, bias, device, dtype)
        self.value = Linear(vdim or d_model, d_model, bias, device, dtype)
        self.output = Linear(d_model, d_model, bias, device, dtype)
        packed = (kdim or d_model) == d_model and (vdim or d_model) == d_model
        for proj in (self.query, self.key, self.value):
            fan_out, fan_in = proj.weight.shape
            proj.weight.set(init.xavier_uniform(proj.weight.shape, fan_in, 3 * fan_out if packed else fan_out, 1.0,
                                                device, dtype))
        for proj in (self.query, self.key, self.value, self.output):
            if proj.bias is not None:
                proj.bias.set(init.zeros(proj.bias.shape, device, dtype))

    def forward(self, query: Tensor, key: Tensor | None = None, value: Tensor | None = None, *,
                attn_mask: Tensor | None = None, key_padding_mask: Tensor | None = None, is_causal: bool = False,
                cache: KVCache | None = None, need_weights: bool = False):
        """Attend from `query` (B, L, E) to `key` (B, S, kdim) and `value` (B, S, vdim).

        Args:
            key, value: default to `query` (self-attention); `value` defaults to `key`.
            attn_mask: (L, S) or (B * n_heads, L, S); bool True = blocked, or float added to scores.
            key_padding_mask: (B, S); bool True = padding (blocked), or float added to scores.
            is_causal: block key j for query i when j > i + S - L (bottom-right aligned, so new queries
                see every cached key and themselves).
            cache: a `KVCache`; this call's keys and values are appended and all cached ones attended
                (a filled static cache is used as it is).
            need_weights: also return the (B, n_heads, L, S) attention weights (before dropout; PyTorch
                averages them over heads unless `average_attn_weights=False`).
        Returns (B, L, E), or `(output, weights)` with `need_weights`. A query that may see no key at all
        gets zero attention output (PyTorch's MultiheadAttention gives NaN there).
        """
        key = query if key is None else key
        value = key if value is None else value
        for name, x in (("query", query), ("key", key), ("value", value)):
            if x.ndim != 3:
                raise ShapeError("MultiHeadAttention", f"{name} must be (batch, length, features), got {x.shape}")
        if key.shape[:2] != value.shape[:2] or key.shape[0] != query.shape[0]:
            raise ShapeError("MultiHeadAttention", f"query {query.shape}, key {key.shape} and value {value.shape} "
                                                   "must share the batch size, key and value the length")
        batch, length = query.shape[:2]
        q = self._heads(self.query(query))
        if cache is not None and cache.static and len(cache):
            k, v = cache.keys, cache.values
        else:
            k, v = self._heads(self.key(key)), self._heads(self.value(value))
            if cache is not None:
                k, v = cache.append(k, v)
        dropping = self.training and self.dropout > 0
        if attn_mask is None and key_padding_mask is None and not need_weights and not dropping \
                and fusable(q, k, v):
            out, weights = attention(q, k, v, causal=is_causal, offset=k.shape[-2] - length)[0], None
        else:
            blocked, bias = self._masks(attn_mask, key_padding_mask, is_causal, batch, length, k.shape[-2], query)
            weights = attention_weights(q, k, blocked, bias)
            out = dropout(weights, self.dropout, self.training) @ v
        out = out.transpose(1, 2).reshape(batch, length, self.d_model)
        out = self.output(out)
        return (out, weights) if need_weights else out

    def _heads(self, x: Tensor) -> Tensor:
        """(B, T, E) -> (B, H, T, E / H)."""
        batch, length, _ = x.shape
        return x.reshape(batch, length, self.n_heads, self.d_model // self.n_heads).transpose(1, 2)

    def _masks(self, attn_mask, key_padding_mask, is_causal: bool, batch: int, length: int, keys: int,
               like: Tensor) -> tuple[Tensor | None, Tensor | None]:
        """Every mask as one blocked (bool) and one bias (float) term, broadcastable to (B, H, L, S)."""
        blocked, bias = _split_mask(attn_mask, allowed_when_true=False)
        mask = blocked if blocked is not None else bias
        if mask is not None:
            if mask.shape == (batch * self.n_heads, length, keys):
                mask = mask.reshape(batch, self.n_heads, length, keys)
            elif mask.shape != (length, keys):
                raise ShapeError("MultiHeadAttention", f"attn_mask of shape {mask.shape}; expected {(length, keys)} "
                                                       f"or {(batch * self.n_heads, length, keys)}")
            blocked, bias = (mask, None) if blocked is not None else (None, mask)
        pad_blocked, pad_bias = _split_mask(key_padding_mask, allowed_when_true=False)
        pad = pad_blocked if pad_blocked is not None else pad_bias
        if pad is not None:
            if pad.shape != (batch, keys):
                raise ShapeError("MultiHeadAttention", f"key_padding_mask of shape {pad.shape}; expected "
                                                       f"{(batch, keys)}")
            pad = pad.reshape(batch, 1, 1, keys)
            if pad_blocked is not None:
                blocked = pad if blocked is None else blocked | pad
            else:
                bias = pad if bias is None else bias + pad
        if is_causal:
            causal = causal_mask(length, keys, keys - length, like.device.inner)
            blocked = causal if blocked is None else blocked | causal
        return blocked, bias

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, dropout={self.dropout}"
