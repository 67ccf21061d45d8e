"""ai.onnx.ml ops: LabelEncoder (a host lookup: its keys may be strings), ArrayFeatureExtractor and
Binarizer (ember ops on the device).

Example:
    >>> OPS[("ai.onnx.ml", "Binarizer")](call, x)   # threshold from the node
"""

from __future__ import annotations

import numpy as np

from ...api import math as M
from ...api.index import index_select
from ...dtype import i64
from .registry import op

ML = "ai.onnx.ml"


def _listed(call, kind: str):
    """The keys_/values_ attribute of `kind` that the node sets (a list or an array), else None."""
    for suffix in ("strings", "int64s", "floats", "tensor"):
        v = call.attr(f"{kind}_{suffix}")
        if v is not None:
            return suffix, list(np.asarray(v).reshape(-1))
    call.unsupported(f"no {kind}_* attribute")


@op("LabelEncoder", domain=ML)
def label_encoder(call, x):
    _, keys = _listed(call, "keys")
    kind, vals = _listed(call, "values")
    defaults = {"strings": call.attr("default_string", "_Unused"), "int64s": call.attr("default_int64", -1),
                "floats": call.attr("default_float", -0.0)}
    tensor = call.attr("default_tensor")
    default = defaults.get(kind) if kind != "tensor" else np.asarray(tensor).reshape(-1)[0]
    table = dict(zip(keys, vals))
    a = np.asarray(call.host(x))
    out = [table.get(k, default) for k in a.reshape(-1)]
    if kind == "strings" or (kind == "tensor" and np.asarray(tensor).dtype.kind in "OUS"):
        return np.array(out, dtype=object).reshape(a.shape)
    dt = {"int64s": np.int64, "floats": np.float32}.get(kind) or np.asarray(tensor).dtype
    return call.const(np.array(out, dtype=dt).reshape(a.shape))


@op("ArrayFeatureExtractor", domain=ML)
def array_feature_extractor(call, x, indices):
    flat = indices.reshape(-1).cast(i64)
    return index_select(x, x.ndim - 1, flat)


@op("Binarizer", domain=ML)
def binarizer(call, x):
    return M.where(x > call.attr("threshold", 0.0), x * 0 + 1, x * 0)
