"""Reshape a loaded state to fit a model: rename keys, pick a subset, cast dtypes, transform tensors.

Every function takes a state (`dict[str, numpy.ndarray]`) and returns a new one; arrays they do
not change are passed through untouched (a memory-mapped array stays a view of its file). They
compose in the order the caller writes:

    state, _ = load("resnet.pth")
    state = select(state, prefix="backbone.", strip=True)
    state = rename(state, [(r"^downsample\\.", "shortcut."), (r"\\.running_var$", ".var")])
    state = cast(state, "f16")

Layouts need no adapting: ember's layers store their weights as PyTorch does (`Linear` and the
recurrent layers (out, in), convolutions (out, in / groups, *kernel)), so tensors move as they are.

Example:
    >>> state = {"module.fc.weight": np.zeros((10, 784), np.float32)}
    >>> rename(state, [(r"^module\\.", "")])["fc.weight"].shape
    (10, 784)
"""

from __future__ import annotations

import re
from typing import Callable, Mapping, Sequence

import numpy as np

from ..dtype import FLOATS, DType, dtype_of
from ..errors import StoreError

__all__ = ["rename", "select", "cast", "transform"]

State = dict[str, np.ndarray]


def rename(state: Mapping[str, np.ndarray], rules: Sequence[tuple[str, str]]) -> State:
    """Rewrite every key through `re.sub(pattern, replacement, key)` for each rule, in order.

    Two keys that end up the same raise `StoreError` naming both.

    Example:
        >>> list(rename({"module.fc.weight": np.zeros(2)}, [(r"^module\\.", "")]))
        ['fc.weight']
    """
    compiled = [(re.compile(pattern), replacement) for pattern, replacement in rules]
    out: State = {}
    source: dict[str, str] = {}
    for key, array in state.items():
        new = key
        for pattern, replacement in compiled:
            new = pattern.sub(replacement, new)
        if new in out:
            raise StoreError(f"rename: keys {source[new]!r} and {key!r} both become {new!r}")
        out[new], source[new] = array, key
    return out


def select(state: Mapping[str, np.ndarray], prefix: str | None = None, pattern: str | None = None,
           strip: bool = False) -> State:
    """Keep the keys that start with `prefix` and match the regex `pattern` (`re.search`).

    `strip=True` removes the prefix from the kept keys, so a sub-module's weights load into the
    sub-module on its own. A selection that keeps nothing raises `StoreError` (usually a typo).

    Example:
        >>> list(select({"encoder.w": np.zeros(1), "decoder.w": np.zeros(1)}, prefix="encoder.", strip=True))
        ['w']
    """
    regex = re.compile(pattern) if pattern is not None else None
    out = {
        (key[len(prefix):] if strip and prefix else key): array
        for key, array in state.items()
        if (prefix is None or key.startswith(prefix)) and (regex is None or regex.search(key))
    }
    if state and not out:
        raise StoreError(f"select: no key matches prefix {prefix!r} and pattern {pattern!r}; "
                         f"keys start like {', '.join(list(state)[:5])}")
    return out


def cast(state: Mapping[str, np.ndarray], to: str | DType | Mapping[str | DType, str | DType]) -> State:
    """Change dtypes: a single target applies to float tensors only (ints and bools keep theirs);
    a mapping `{"f32": "f16"}` casts exactly the tensors of each source dtype.

    Example:
        >>> cast({"w": np.ones(2, np.float32), "step": np.array(3)}, "bf16")["step"].dtype
        dtype('int64')
    """
    if isinstance(to, Mapping):
        table = {dtype_of(src).np: dtype_of(dst).np for src, dst in to.items()}
    else:
        target = dtype_of(to).np
        table = {d.np: target for d in FLOATS}
    out: State = {}
    for key, array in state.items():
        if not isinstance(array, np.ndarray):  # a quantized tensor keeps its scheme
            out[key] = array
            continue
        target = table.get(array.dtype.newbyteorder("="))
        out[key] = array if target is None or array.dtype == target else array.astype(target)
    return out


def transform(state: Mapping[str, np.ndarray], transforms: Mapping[str, Callable[[np.ndarray], np.ndarray]]) -> State:
    """Apply a function to named tensors; every named key must exist (a silent miss hides a bug).

    Example:
        >>> transform({"w": np.zeros((2, 3))}, {"w": np.transpose})["w"].shape
        (3, 2)
    """
    missing = [key for key in transforms if key not in state]
    if missing:
        raise StoreError(f"transform: no tensor named {', '.join(map(repr, missing))} in the state")
    return {key: transforms[key](array) if key in transforms else array for key, array in state.items()}
