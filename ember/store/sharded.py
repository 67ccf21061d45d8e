"""Sharded checkpoints: an index JSON naming, per tensor, the file of the folder that holds it.

Hugging Face splits large models into `model-00001-of-00003.safetensors` (or `.bin`) shards next to
`model.safetensors.index.json`:

    {"metadata": {"total_size": 16060522496},
     "weight_map": {"lm_head.weight": "model-00003-of-00003.safetensors", ...}}

`load_sharded` loads each shard once (each in its own format, memory-mapped by default) and returns
the tensors the weight map lists, in its order. Shard names must be plain file names in the index's
folder: an index cannot send the reader elsewhere on the disk.

Example:
    >>> state, metadata = load_sharded("llama/model.safetensors.index.json")
    >>> metadata["total_size"]
    '16060522496'
"""

from __future__ import annotations

import json
import os

import numpy as np

from ..errors import StoreError
from .formats import detect_format
from .native import load_native
from .safetensors import load_safetensors
from .torch_pickle import load_torch

__all__ = ["load_sharded"]

_LOADERS = {"native": load_native, "safetensors": load_safetensors, "torch": load_torch}


def load_sharded(path: str | os.PathLike, mmap: bool = True) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Read a sharded checkpoint from its index JSON: `(state, metadata)`; metadata is the index's own
    `metadata` with non-string values as JSON text.

    Example:
        >>> state, _ = load_sharded("model.safetensors.index.json")
    """
    name = os.fspath(path)
    weight_map, metadata = _read_index(name)
    folder = os.path.dirname(os.path.abspath(name))
    shards: dict[str, dict[str, np.ndarray]] = {}
    state: dict[str, np.ndarray] = {}
    for key, shard in weight_map.items():
        if shard not in shards:
            shard_path = os.path.join(folder, shard)
            if not os.path.isfile(shard_path):
                raise StoreError(f"{name}: shard {shard!r} (holding {key!r}) is not a file in {folder}")
            shards[shard] = _LOADERS[detect_format(shard_path, reading=True)](shard_path, mmap=mmap)[0]
        if key not in shards[shard]:
            raise StoreError(f"{name}: the weight map puts {key!r} in {shard!r}, which does not hold it")
        state[key] = shards[shard][key]
    return state, metadata


def _read_index(name: str) -> tuple[dict[str, str], dict[str, str]]:
    try:
        with open(name, "rb") as f:
            index = json.loads(f.read())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StoreError(f"{name}: not valid JSON ({e})") from e
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise StoreError(f"{name}: expected an index with a 'weight_map' object of tensor name -> shard file")
    for shard in set(weight_map.values()):
        if os.path.basename(shard) != shard or shard in ("", ".", ".."):
            raise StoreError(f"{name}: shard {shard!r} must be a plain file name in the index's folder")
    raw = index.get("metadata") or {}
    if not isinstance(raw, dict):
        raise StoreError(f"{name}: 'metadata' must be an object, got {raw!r}")
    return weight_map, {k: v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}
