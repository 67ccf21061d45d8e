"""BERT's tokenizer: basic tokenization, then greedy longest-match-first WordPiece.

Basic tokenization (HuggingFace's `BertNormalizer` + `BertPreTokenizer`):
1. clean: drop NUL, U+FFFD and control, format and private-use characters; whitespace becomes a space;
2. put spaces around CJK ideographs, so each is a word;
3. strip accents (NFD, then drop combining marks), then lowercase, for uncased vocabularies;
4. split on whitespace, then split every punctuation character off as its own word.

WordPiece then splits each word into the longest vocabulary prefix, then the longest `##`-prefixed
continuation, and so on; a word with no full split (or longer than `max_chars_per_word`) becomes
`[UNK]`. `encode` wraps the pieces as `[CLS] ... [SEP]`; calling the tokenizer on a batch pads it and
returns ids, token types and the attention mask as NumPy arrays.

The result equals HuggingFace's `tokenizers` (BertNormalizer, BertPreTokenizer, WordPiece) except for
characters whose Unicode category differs between Python's Unicode database and the tables `tokenizers`
was built with (characters added in recent Unicode versions, e.g. U+061D).

Example:
    >>> tok = WordPieceTokenizer.from_dir(model_dir)
    >>> tok.tokenize("Unaffable, isn't it?")
    ['una', '##ffa', '##ble', ',', 'isn', "'", 't', 'it', '?']
    >>> tok(["hello world", "hi"]).input_ids.shape
    (2, 4)
"""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np

from ..errors import EmberError


class Encoding(NamedTuple):
    """A padded batch: `input_ids`, `token_type_ids` and `attention_mask` (1 = real token), each (B, T) i64."""

    input_ids: np.ndarray
    token_type_ids: np.ndarray
    attention_mask: np.ndarray


class WordPieceTokenizer:
    """BERT's tokenizer over a vocabulary (one token per line, the line number is its id).

    Args:
        vocab: token -> id.
        lowercase: lowercase the text (uncased models).
        strip_accents: remove accents; `None` follows `lowercase`, as in BERT.
        split_cjk: make every CJK ideograph its own word.
        max_length: the longest encoding, special tokens included (longer inputs are truncated).
        max_chars_per_word: longer words become the unknown token.
        unk, cls, sep, pad: the special tokens.

    Example:
        >>> tok = WordPieceTokenizer({"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "[PAD]": 3, "play": 4, "##ing": 5})
        >>> tok.encode("Playing")
        [1, 4, 5, 2]
    """

    def __init__(self, vocab: dict[str, int], lowercase: bool = True, strip_accents: bool | None = None,
                 split_cjk: bool = True, max_length: int = 512, max_chars_per_word: int = 100,
                 unk: str = "[UNK]", cls: str = "[CLS]", sep: str = "[SEP]", pad: str = "[PAD]") -> None:
        missing = [t for t in (unk, cls, sep, pad) if t not in vocab]
        if missing:
            raise EmberError(f"WordPieceTokenizer: the vocabulary lacks the special token(s) {missing}")
        if max_length < 2:
            raise ValueError(f"WordPieceTokenizer: max_length must leave room for [CLS] and [SEP], got {max_length}")
        self.vocab = dict(vocab)
        self.tokens = {i: t for t, i in self.vocab.items()}
        self.lowercase = lowercase
        self.strip_accents = lowercase if strip_accents is None else strip_accents
        self.split_cjk, self.max_length, self.max_chars_per_word = split_cjk, max_length, max_chars_per_word
        self.unk, self.cls, self.sep, self.pad = unk, cls, sep, pad

    @classmethod
    def from_dir(cls, path: str | os.PathLike, max_length: int | None = None) -> "WordPieceTokenizer":
        """Read `vocab.txt` and the settings of `tokenizer_config.json` (if present) from a model directory;
        `max_length` defaults to the config's `model_max_length` (512 when absent).

        Example:
            >>> WordPieceTokenizer.from_dir("all-MiniLM-L6-v2/", max_length=256)
        """
        path = Path(path)
        vocab_file = path / "vocab.txt"
        if not vocab_file.is_file():
            raise FileNotFoundError(f"WordPieceTokenizer.from_dir: no vocab.txt in {path}")
        with open(vocab_file, encoding="utf-8") as f:
            vocab = {line.rstrip("\n"): i for i, line in enumerate(f)}
        config_file = path / "tokenizer_config.json"
        config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
        special = {name: config[f"{name}_token"] for name in ("unk", "cls", "sep", "pad") if f"{name}_token" in config}
        return cls(vocab, lowercase=config.get("do_lower_case", True), strip_accents=config.get("strip_accents"),
                   split_cjk=config.get("tokenize_chinese_chars", True),
                   max_length=max_length or min(int(config.get("model_max_length", 512)), 10 ** 6), **special)

    # ---- text -> pieces --------------------------------------------------------------------------
    def basic_tokenize(self, text: str) -> list[str]:
        """Steps 1-4 of the module docs: the words, before WordPiece.

        Example:
            >>> tok.basic_tokenize("Héllo, wörld!")
            ['hello', ',', 'world', '!']
        """
        text = "".join(" " if _is_whitespace(c) else c for c in text if not _is_dropped(c))
        if self.split_cjk:
            text = "".join(f" {c} " if _is_cjk(c) else c for c in text)
        if self.strip_accents:
            text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        if self.lowercase:
            # Character by character: str.lower() of a whole text makes a word-final sigma 'ς', BERT's 'σ'.
            text = "".join(c.lower() for c in text)
        words: list[str] = []
        for chunk in text.split():
            words.extend(_split_punctuation(chunk))
        return words

    def wordpiece(self, word: str) -> list[str]:
        """Greedy longest-match-first split of one word into vocabulary pieces (`[UNK]` if none fits).

        Example:
            >>> tok.wordpiece("unaffable")
            ['una', '##ffa', '##ble']
        """
        if len(word) > self.max_chars_per_word:
            return [self.unk]
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    break
                end -= 1
            if end == start:
                return [self.unk]
            pieces.append(piece)
            start = end
        return pieces

    def tokenize(self, text: str) -> list[str]:
        """The WordPiece tokens of `text`, without special tokens."""
        return [piece for word in self.basic_tokenize(text) for piece in self.wordpiece(word)]

    # ---- pieces -> ids ---------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """`[CLS] tokens [SEP]` as ids, truncated to `max_length`.

        Example:
            >>> tok.encode("hello world")
            [101, 7592, 2088, 102]
        """
        ids = [self.vocab.get(t, self.vocab[self.unk]) for t in self.tokenize(text)]
        return [self.vocab[self.cls], *ids[:self.max_length - 2], self.vocab[self.sep]]

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        """Ids back to text: pieces joined, `##` continuations glued to the previous piece.

        Example:
            >>> tok.decode(tok.encode("Unaffable!"))
            'unaffable!'
        """
        special = {self.cls, self.sep, self.pad}
        tokens = [self.tokens[int(i)] for i in ids if not (skip_special and self.tokens[int(i)] in special)]
        text = " ".join(tokens).replace(" ##", "")
        for mark in ".,!?;:'":
            text = text.replace(f" {mark}", mark)
        return text

    def __call__(self, texts: str | Sequence[str]) -> Encoding:
        """Encode a batch (or one text), padded on the right to its longest encoding.

        Example:
            >>> enc = tok(["a b c", "a"])
            >>> enc.attention_mask.tolist()
            [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
        """
        if isinstance(texts, str):
            texts = [texts]
        encoded = [self.encode(t) for t in texts]
        width = max((len(e) for e in encoded), default=0)
        ids = np.full((len(encoded), width), self.vocab[self.pad], dtype=np.int64)
        mask = np.zeros((len(encoded), width), dtype=np.int64)
        for row, e in enumerate(encoded):
            ids[row, :len(e)] = e
            mask[row, :len(e)] = 1
        return Encoding(ids, np.zeros_like(ids), mask)

    def __len__(self) -> int:
        return len(self.vocab)


def _is_whitespace(c: str) -> bool:
    return c in " \t\n\r" or unicodedata.category(c) == "Zs"


def _is_dropped(c: str) -> bool:
    """NUL, the replacement character, and control, format and private-use characters other than tab and
    newlines. Unassigned code points (Cn) are kept, as HuggingFace's tokenizers do: which code points are
    unassigned depends on the Unicode version, so keeping them makes the result independent of it."""
    if c in "\t\n\r":
        return False
    return ord(c) in (0, 0xFFFD) or unicodedata.category(c) in ("Cc", "Cf", "Co", "Cs")


def _is_punctuation(c: str) -> bool:
    # BERT treats every non-alphanumeric ASCII symbol as punctuation ("$", "^", "`"), not only category P.
    cp = ord(c)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(c).startswith("P")


# The CJK Unified Ideographs blocks BERT splits (Hangul, Hiragana and Katakana are not among them).
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
               (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _is_cjk(c: str) -> bool:
    cp = ord(c)
    return any(low <= cp <= high for low, high in _CJK_RANGES)


def _split_punctuation(word: str) -> list[str]:
    out: list[str] = []
    current = ""
    for c in word:
        if _is_punctuation(c):
            if current:
                out.append(current)
            out.append(c)
            current = ""
        else:
            current += c
    if current:
        out.append(current)
    return out
