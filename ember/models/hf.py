"""Hugging Face checkpoint folders: `config.json`, the weights file(s) and `tokenizer.json`.

`checkpoint_file` finds the weights as `save_pretrained` writes them: `model.safetensors`, its sharded
index `model.safetensors.index.json`, or PyTorch's `pytorch_model.bin` and its index; `ember.store`
reads each (memory-mapped). `load_tokenizer` wraps `tokenizer.json` through the `tokenizers` package
(the `llm` extra), imported on first use.

Example:
    >>> state = load_weights("tiny-llama/", rename=[(r"^model\\.", "")])
    >>> tokenizer = load_tokenizer("tiny-llama/")
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from .. import store
from ..errors import ConfigError, StoreError

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def checkpoint_file(path: str | os.PathLike) -> Path:
    """The weights file of a checkpoint folder (the first of `WEIGHT_FILES` present), or `path` itself."""
    path = Path(path)
    if not path.is_dir():
        return path
    for name in WEIGHT_FILES:
        if (path / name).is_file():
            return path / name
    raise StoreError(f"{path}: none of {', '.join(WEIGHT_FILES)} in this directory")


def load_weights(path: str | os.PathLike, rename: Sequence[tuple[str, str]] | None = None) -> dict[str, np.ndarray]:
    """The tensors of a checkpoint (folder or file), keys renamed by `rename` (regex, replacement) rules."""
    state, _ = store.load(checkpoint_file(path), rename=rename)
    return state


def read_config(path: str | os.PathLike, model_types: Sequence[str]) -> dict:
    """A folder's `config.json` (or the file itself) as a dict, checking its `model_type`."""
    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"{file}: cannot read the model's config.json ({str(e)[:200]})") from None
    if not isinstance(data, dict) or data.get("model_type", model_types[0]) not in model_types:
        raise ConfigError(f"{file}: model_type {data.get('model_type')!r} is not one of {list(model_types)}")
    return data


class Tokenizer:
    """A `tokenizers.Tokenizer` (from a `tokenizer.json`) as text <-> ids.

    Example:
        >>> tok = load_tokenizer("tiny-llama/")
        >>> tok.decode(tok.encode("hello"))
        'hello'
    """

    def __init__(self, inner) -> None:
        self.inner = inner

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.inner.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.inner.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_id(self, token: str) -> int | None:
        return self.inner.token_to_id(token)

    @property
    def vocab_size(self) -> int:
        return self.inner.get_vocab_size()


def load_tokenizer(path: str | os.PathLike) -> Tokenizer | None:
    """The folder's `tokenizer.json` as a `Tokenizer`, or None when the checkpoint ships none."""
    file = Path(path) / "tokenizer.json"
    if not file.is_file():
        return None
    try:
        import tokenizers  # optional: the llm extra
    except ImportError:
        raise ImportError(f"{file}: reading a tokenizer needs the tokenizers package: "
                          f"pip install 'ember[llm]'") from None
    return Tokenizer(tokenizers.Tokenizer.from_file(str(file)))
