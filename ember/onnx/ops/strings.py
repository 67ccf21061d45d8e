"""String ONNX ops on host NumPy object arrays (ember holds no strings, and nothing here is
differentiated): StringNormalizer, StringSplit, StringConcat, RegexFullMatch. Outputs of numbers
(StringSplit's counts, RegexFullMatch's booleans) are tensors on the node's device.

Example:
    >>> OPS[("", "StringConcat")](call, np.array(["a"], object), np.array(["b"], object))
    array(['ab'], dtype=object)
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np

from .registry import op


def strings(call, x) -> np.ndarray:
    return np.asarray(call.host(x), dtype=object)


@op("StringConcat")
def string_concat(call, a, b):
    return np.asarray(strings(call, a) + strings(call, b), dtype=object)


@op("RegexFullMatch")
def regex_full_match(call, x):
    pattern = re.compile(call.attr("pattern"))
    a = strings(call, x)
    return call.const(np.array([pattern.fullmatch(s) is not None for s in a.reshape(-1)], bool).reshape(a.shape))


@op("StringSplit")
def string_split(call, x):
    sep = call.attr("delimiter") or None  # "" or absent: runs of whitespace, as str.split()
    maxsplit = call.attr("maxsplit", -1)
    a = strings(call, x)
    parts = [s.split(sep, maxsplit) for s in a.reshape(-1)]
    width = max((len(p) for p in parts), default=0)
    out = np.array([p + [""] * (width - len(p)) for p in parts], dtype=object).reshape(*a.shape, width)
    return out, call.const(np.array([len(p) for p in parts], np.int64).reshape(a.shape))


def _plain(s: str) -> str:
    """`s` without combining accents (NFKD), as ONNX's reference normalizes."""
    if s.isascii():
        return s
    return "".join(c for c in unicodedata.normalize("NFKD", s) if not unicodedata.combining(c))


@op("StringNormalizer")
def string_normalizer(call, x):
    """Stop words removed (case-sensitively or not), then case changed; [C] or [1, C] inputs, an
    all-removed row giving one empty string."""
    action = call.attr("case_change_action", "NONE")
    sensitive = bool(call.attr("is_case_sensitive", 0))
    stops = set(call.attr("stopwords", []) or [])
    fold = (lambda s: s) if sensitive else str.lower
    stops = {fold(w) for w in stops}
    change = {"LOWER": str.lower, "UPPER": str.upper, "NONE": lambda s: s}.get(action)
    if change is None:
        call.unsupported(f"case_change_action {action!r} (known: LOWER, UPPER, NONE)")
    a = strings(call, x)
    kept = [change(_plain(s)) for s in a.reshape(-1) if fold(s) not in stops] or [""]
    return np.array(kept, dtype=object).reshape(*a.shape[:-1], len(kept))
