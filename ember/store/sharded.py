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

from ..errors import StoreError, brief
from .formats import detect_format
from .native import load_native
from .safetensors import load_safetensors
from .state import parse_json
from .torch_pickle import load_torch

__all__ = ["load_sharded"]

_LOADERS = {"native": load_native, "safetensors": load_safetensors, "torch": load_torch}
_MAX_INDEX = 100_000_000


def load_sharded(path: str | os.PathLike, mmap: bool = True) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Read a sharded checkpoint from its index JSON: `(state, metadata)`; metadata is the index's own
    `metadata` with non-string values as JSON text.

    The index must be strict JSON (`state.parse_json`) of at most 100 MB: an object with a
    "weight_map" of tensor name -> plain file name and an optional "metadata" object, nothing else.
    Each shard is loaded, and validated, by its own format's loader; every tensor the map names must
    be in its shard, and every tensor of a shard must be in the map under that shard. Anything else
    raises `StoreError` naming the index.

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
            shards[shard] = _load_shard(name, folder, shard, key, mmap)
        if key not in shards[shard]:
            raise StoreError(f"{name}: the weight map puts {brief(key)} in {brief(shard)}, which does not hold it")
        state[key] = shards[shard][key]
    for shard, held in shards.items():
        for key in held:
            if weight_map.get(key) != shard:
                raise StoreError(f"{name}: shard {brief(shard)} holds {brief(key)}, which the weight map "
                                 f"{'puts in ' + brief(weight_map[key]) if key in weight_map else 'does not list'}")
    return state, metadata


def _load_shard(name: str, folder: str, shard: str, key: str, mmap: bool) -> dict[str, np.ndarray]:
    shard_path = os.path.join(folder, shard)
    if not os.path.isfile(shard_path):
        raise StoreError(f"{name}: shard {brief(shard)} (holding {brief(key)}) is not a file in {folder}")
    fmt = detect_format(shard_path, reading=True)
    if fmt not in _LOADERS:
        raise StoreError(f"{name}: shard {brief(shard)} is a {fmt} file, not one of {', '.join(_LOADERS)}")
    return _LOADERS[fmt](shard_path, mmap=mmap)[0]


def _read_index(name: str) -> tuple[dict[str, str], dict[str, str]]:
    with open(name, "rb") as f:
        if os.fstat(f.fileno()).st_size > _MAX_INDEX:
            raise StoreError(f"{name}: over {_MAX_INDEX // 10**6} MB; not a sharded checkpoint's index")
        index = parse_json(name, f.read(), "index")
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise StoreError(f"{name}: expected an index with a 'weight_map' object of tensor name -> shard file")
    if set(index) - {"weight_map", "metadata"}:
        raise StoreError(f"{name}: unknown key(s) {brief(sorted(set(index) - {'weight_map', 'metadata'}))}; "
                         "an index holds 'weight_map' and 'metadata'")
    for shard in set(weight_map.values()):
        if os.path.basename(shard) != shard or shard in ("", ".", ".."):
            raise StoreError(f"{name}: shard {brief(shard)} must be a plain file name in the index's folder")
    raw_metadata = index.get("metadata", {})
    if not isinstance(raw_metadata, dict):
        raise StoreError(f"{name}: 'metadata' must be an object, got {brief(raw_metadata)}")
    try:
        metadata = {k: v if isinstance(v, str) else json.dumps(v) for k, v in raw_metadata.items()}
    except RecursionError:
        raise StoreError(f"{name}: 'metadata' nests too deeply") from None
    return weight_map, metadata
