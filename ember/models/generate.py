"""Text generation for the causal language models of `ember.models`: greedy or sampled (temperature,
top-k, top-p), with stop tokens, through each model's KV cache.

A `CausalLM` implements `forward(input_ids, cache=None) -> logits (B, L, vocab)` and `new_cache()`; with a
cache, a call sees the tokens of the calls before it. `generate` feeds the prompt once, then one token
per step. Tokens are chosen on the host from the last position's logits (f64): greedy is the argmax
(the first on ties, as `torch.argmax`); sampling draws from softmax(logits / temperature) restricted to
the `top_k` largest and to the smallest set whose probability reaches `top_p`, with NumPy's generator
seeded by `seed`.

Example:
    >>> ids = model.generate([[1, 5, 9]], max_new_tokens=8, stop_tokens=[2])
    >>> ids.shape
    (1, 11)
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..api.creation import from_numpy
from ..autodiff.grad_mode import no_grad
from ..nn.attention import KVCache
from ..nn.module import Module
from ..tensor import Tensor
from .hf import Tokenizer, load_tokenizer


class CausalLM(Module):
    """Base of the decoder-only language models: the head (`lm_head`, or None when tied to the token
    embedding), the KV cache, the tokenizer and `generate`. A subclass names its `parts()`."""

    lm_head: Module | None = None
    _tokenizer: Tokenizer | None = None

    def parts(self) -> tuple[Module, list, Module]:
        """(the decoder: ids and cache to states, its blocks, the token embedding)."""
        raise NotImplementedError(f"{type(self).__name__} defines no parts()")

    @property
    def tokenizer(self) -> Tokenizer | None:
        """The checkpoint's `tokenizer.json` as a `Tokenizer` (None if it shipped none)."""
        return self._tokenizer

    def new_cache(self) -> list[KVCache]:
        """One empty `KVCache` per block."""
        return [KVCache() for _ in self.parts()[1]]

    def forward(self, input_ids: Tensor, cache: list[KVCache] | None = None) -> Tensor:
        decoder, _, embedding = self.parts()
        x = decoder(input_ids, cache)
        return self.lm_head(x) if self.lm_head is not None else x @ embedding.weight.T

    def loaded(self, state: dict, path) -> "CausalLM":
        """This model with `state` loaded (strictly) and the folder's tokenizer, in eval mode."""
        self.load_state_dict(state)
        self._tokenizer = load_tokenizer(path)
        return self.eval()

    def generate(self, input_ids, max_new_tokens: int = 20, temperature: float = 0.0, top_k: int | None = None,
                 top_p: float | None = None, stop_tokens: Sequence[int] = (), seed: int | None = None,
                 use_cache: bool = True) -> np.ndarray:
        """The (B, L + T) int64 ids of the prompts (B, L) and up to `max_new_tokens` generated tokens.

        Args:
            input_ids: (B, L) ints (a list of equal-length lists, an array or a tensor).
            temperature: 0 picks the most likely token (greedy); above 0 samples.
            top_k, top_p: restrict sampling to the k most likely tokens / the nucleus of probability p.
            stop_tokens: a row ends once it emits one of these; rows that ended are filled with the first
                stop token until every row has ended or `max_new_tokens` are made.
            seed: the sampling generator's seed.
            use_cache: keep keys and values between steps (False: recompute the whole sequence each step).
        """
        ids = np.array(input_ids.numpy() if isinstance(input_ids, Tensor) else input_ids, dtype=np.int64)
        if ids.ndim != 2 or ids.shape[1] == 0:
            raise ValueError(f"generate: input_ids must be (batch, length) with length >= 1, got shape {ids.shape}")
        if max_new_tokens < 0 or temperature < 0 or (top_k is not None and top_k < 1) or \
                (top_p is not None and not 0 < top_p <= 1):
            raise ValueError(f"generate: needs max_new_tokens >= 0, temperature >= 0, top_k >= 1, 0 < top_p <= 1; got "
                             f"{max_new_tokens}, {temperature}, {top_k}, {top_p}")
        device = self.parameters()[0].device.inner
        rng = np.random.default_rng(seed)
        stops = np.array(list(stop_tokens), dtype=np.int64)
        done = np.zeros(len(ids), dtype=bool)
        cache = self.new_cache() if use_cache else None
        fed = ids
        with no_grad():
            for _ in range(max_new_tokens):
                logits = self(from_numpy(fed, device), cache=cache)[:, -1].numpy().astype(np.float64)
                token = np.array([choose(row, temperature, top_k, top_p, rng) for row in logits], dtype=np.int64)
                if len(stops):
                    token = np.where(done, stops[0], token)
                    done |= np.isin(token, stops)
                ids = np.concatenate([ids, token[:, None]], axis=1)
                fed = token[:, None] if use_cache else ids
                if done.all():
                    break
        return ids


def choose(logits: np.ndarray, temperature: float, top_k: int | None, top_p: float | None,
           rng: np.random.Generator) -> int:
    """One token from one row of logits (see the module docs)."""
    if temperature == 0:
        return int(np.argmax(logits))
    z = logits / temperature
    if top_k is not None and top_k < len(z):
        z = np.where(z < np.sort(z)[-top_k], -np.inf, z)
    p = np.exp(z - z.max())
    p /= p.sum()
    if top_p is not None and top_p < 1:
        order = np.argsort(-p, kind="stable")
        before = np.cumsum(p[order]) - p[order]  # the probability of the tokens ranked above each
        keep = np.zeros_like(p, dtype=bool)
        keep[order[before < top_p]] = True
        p = np.where(keep, p, 0.0)
        p /= p.sum()
    return int(rng.choice(len(p), p=p))
