"""Quantized tensors in model files (native and safetensors): a `QTensor` under key K is written as
one entry per part, `K:values`, `K:scales` and, where the scheme has them, `K:zeros`, `K:scales2`,
`K:offset` (ordinary uint8 / float arrays), plus the metadata entry `ember.qtensor:K`, the JSON
`{"scheme": {...QuantScheme fields}, "shape": [...]}`. Loading joins them back into a `QTensor` whose
parts are host tensors (`Device.numpy()`, over the file's memory) and checks every part against the
scheme: a missing, extra or misshapen part, or a bad scheme, is a `StoreError` naming the file and K.

Example:
    >>> arrays, meta = split({"w": q})
    >>> sorted(arrays), list(meta)
    (['w:scales', 'w:values'], ['ember.qtensor:w'])
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

import numpy as np

from ..api.quantize import QTensor
from ..device import Device
from ..errors import EmberError, StoreError
from ..qscheme import QuantScheme
from ..tensor import from_host

__all__ = ["split", "join", "META_PREFIX", "PARTS"]

META_PREFIX = "ember.qtensor:"
PARTS = ("values", "scales", "zeros", "scales2", "offset")


def split(state: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(arrays, metadata) of a state whose values may be `QTensor`s: each becomes its part entries."""
    arrays: dict[str, np.ndarray] = {}
    metadata: dict[str, str] = {}
    for key, value in state.items():
        if not isinstance(value, QTensor):
            arrays[key] = value
            continue
        for part, tensor in value.parts.items():
            arrays[f"{key}:{part}"] = np.asarray(tensor.numpy())
        metadata[META_PREFIX + key] = json.dumps({"scheme": value.scheme.to_dict(), "shape": list(value.shape)})
    return arrays, metadata


def join(path: str | os.PathLike, arrays: dict[str, np.ndarray], metadata: dict[str, str]
         ) -> tuple[dict[str, Any], dict[str, str]]:
    """The inverse of `split`: (state with `QTensor`s, the other metadata)."""
    state: dict[str, Any] = dict(arrays)
    rest = {}
    for name, text in metadata.items():
        if not name.startswith(META_PREFIX):
            rest[name] = text
            continue
        key = name[len(META_PREFIX):]
        where = f"{os.fspath(path)}: quantized tensor {key!r}"
        try:
            record = json.loads(text)
            scheme = QuantScheme.from_dict(record["scheme"])
            shape = tuple(int(n) for n in record["shape"])
        except (ValueError, KeyError, TypeError, EmberError) as e:
            raise StoreError(f"{where}: its metadata entry {name!r} is not a scheme and shape ({e})") from None
        expected = scheme.parts(shape) if _fits(scheme, shape) else {}
        missing = [p for p in expected if f"{key}:{p}" not in state]
        if not expected or missing:
            raise StoreError(f"{where} ({scheme}, shape {shape}): missing parts "
                             f"{', '.join(f'{key}:{p}' for p in missing) or '(the scheme does not fit the shape)'}")
        parts = {p: state.pop(f"{key}:{p}") for p in expected}
        extra = [f"{key}:{p}" for p in PARTS if f"{key}:{p}" in state]
        if extra:
            raise StoreError(f"{where} ({scheme}): entries {extra} are not parts of this scheme")
        host = Device.numpy()
        try:
            state[key] = QTensor(scheme, shape, {p: from_host(a, host) for p, a in parts.items()})
        except EmberError as e:
            raise StoreError(f"{where}: {e}") from None
    return state, rest


def _fits(scheme: QuantScheme, shape: tuple[int, ...]) -> bool:
    try:
        scheme.check(shape)
    except EmberError:
        return False
    return True
