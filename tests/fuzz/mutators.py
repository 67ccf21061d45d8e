"""Ways to damage a file, as hypothesis strategies: byte-level edits and edits of a JSON document.

`damaged(data, raw)` applies 1-4 edits (flip a bit, set a byte to a value parsers care about,
delete, insert or duplicate a run, truncate); `json_edit(data, doc)` replaces one value anywhere in
a parsed JSON document by another of a different kind, drops or adds a key, or renames one to a
sibling's name.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

# bytes that change how JSON, pickles and zips parse: quotes, brackets, digits, signs, opcodes, NUL
_TELLING = b'"{}[],:-0159eE.\\ \x00\x80\xff\x02\x4b\x4a\x85\x86qhrtsX'
_ODD_VALUES = [0, -1, 1, 3, 7, 8, 63, 64, 65, 2**31, 2**32 - 1, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64,
               10**30, 1.5, -0.0, 1e308, "", "F32", "I64", "U16", "F8_E4M3", "BOOL", "f32", "i64", "bf16", "x" * 300,
               None, True, False, [], {}, [0], [1, 2], [0, 2**63], [2**62, 4], {"a": "b"}, {"a": 1}, ["F32"]]

_odd_value = st.sampled_from(_ODD_VALUES)  # drawn values are copied: edits must not change this table


@st.composite
def damaged(draw: st.DrawFn, raw: bytes) -> bytes:
    out = bytearray(raw)
    for _ in range(draw(st.integers(1, 4), label="edits")):
        kind = draw(st.sampled_from(["bit", "byte", "delete", "insert", "duplicate", "truncate"]), label="kind")
        at = draw(st.integers(0, max(len(out) - 1, 0)), label="at")
        if kind == "bit" and out:
            out[at] ^= 1 << draw(st.integers(0, 7), label="bit")
        elif kind == "byte" and out:
            out[at] = draw(st.sampled_from(_TELLING), label="value")
        elif kind == "delete":
            del out[at:at + draw(st.integers(1, 16), label="length")]
        elif kind == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=16), label="inserted")
        elif kind == "duplicate":
            out[at:at] = out[at:at + draw(st.integers(1, 64), label="length")]
        elif kind == "truncate":
            del out[at:]
    return bytes(out)


def _paths(doc: Any, here: tuple = ()) -> list[tuple]:
    """Every position in a JSON document (the root too) as a tuple of keys and indices."""
    found = [here]
    if isinstance(doc, dict):
        for k, v in doc.items():
            found += _paths(v, here + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            found += _paths(v, here + (i,))
    return found


def _parent(doc: Any, path: tuple) -> Any:
    for step in path[:-1]:
        doc = doc[step]
    return doc


@st.composite
def json_edit(draw: st.DrawFn, doc: Any) -> tuple[Any, list[tuple[str, str]]]:
    """A damaged copy of `doc`, and (old, new) renames to apply to the text to make duplicate keys
    (JSON documents as Python dicts cannot hold them)."""
    doc = copy.deepcopy(doc)
    renames: list[tuple[str, str]] = []
    for _ in range(draw(st.integers(1, 3), label="edits")):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths), label="path")
        parent, step = _parent(doc, path), path[-1]
        kind = draw(st.sampled_from(["replace", "replace", "drop", "add", "duplicate"]), label="kind")
        if kind == "replace":
            parent[step] = copy.deepcopy(draw(_odd_value | st.integers() | st.text(max_size=8), label="value"))
        elif kind == "drop":
            del parent[step]
        elif kind == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["x", "dtype", "shape", "__metadata__", "metadata", "tensors"]))] = (
                copy.deepcopy(draw(_odd_value, label="added")))
        elif kind == "add":
            parent.append(copy.deepcopy(draw(_odd_value, label="added")))
        elif kind == "duplicate" and isinstance(parent, dict) and len(parent) > 1:
            other = draw(st.sampled_from([k for k in parent if k != step]), label="other")
            renames.append((f'"{step}":', f'"{other}":'))
    return doc, renames
