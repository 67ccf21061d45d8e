"""Model files: ember's native format, safetensors and PyTorch files, at the level of host arrays.

A *state* is `dict[str, numpy.ndarray]` (bf16 through `ml_dtypes.bfloat16`) and *metadata* is
`dict[str, str]`. `save` and `load` pick the format from `format=`, else from the file (its first
bytes when reading, then its extension): `.ember` native, `.safetensors`, `.pt`/`.pth`/`.bin`
PyTorch, and, for reading, the `.json` index of a sharded checkpoint and `.gguf` (`ember.store.gguf`:
quantized tensors dequantized, metadata values not str as JSON). Loaded arrays are read-only
views of the memory-mapped file unless `mmap=False`. `ember.store.remap` renames, selects, casts and
transforms states to fit a model. A state may hold quantized tensors (`QTensor`): native and safetensors
files store their parts as entries `key:values`, `key:scales`, ... with the scheme in the metadata
(`ember.store.quantized`), and `load` returns them joined. `save_module` and `load_module` (`ember.store.module`) save a
`Module` and load a file into one, PyTorch state dicts included (`adapter="pytorch"`).

Example:
    >>> save("m.ember", {"w": np.ones((2, 3), np.float32)}, metadata={"epoch": "3"})
    >>> state, metadata = load("m.ember")
    >>> state["w"].shape, metadata
    ((2, 3), {'epoch': '3'})
"""

from __future__ import annotations

import json
import os
from typing import Mapping, Sequence

import numpy as np

from ..atomic import tidy
from ..dtype import DType
from ..errors import StoreError
from . import remap
from .formats import EXTENSIONS, FORMAT_NAMES, detect_format
from .native import load_native, save_native
from .quantized import join as _join_quantized, split as _split_quantized
from .safetensors import load_safetensors, save_safetensors
from .sharded import load_sharded
from .gguf import load_gguf, read_gguf
from .torch_pickle import load_torch
from .torch_writer import save_torch
from .module import save_module, load_module, from_pytorch

__all__ = [
    "save", "load", "save_native", "load_native", "save_safetensors", "load_safetensors", "save_torch",
    "load_torch", "load_sharded", "read_gguf", "load_gguf", "remap", "EXTENSIONS", "FORMAT_NAMES", "save_module",
    "load_module", "from_pytorch",
]

_SAVERS = {"native": save_native, "safetensors": save_safetensors, "torch": save_torch}


def save(path: str | os.PathLike, state: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None,
         format: str | None = None) -> None:
    """Write `state` to `path` atomically, in `format` or the one its extension names.

    Example:
        >>> save("model.safetensors", {"w": np.zeros(3, np.float32)})
    """
    fmt = format or detect_format(path, reading=False)
    if fmt == "sharded":
        raise StoreError(f"{os.fspath(path)}: ember reads sharded checkpoints but writes single files")
    if fmt == "gguf":
        raise StoreError(f"{os.fspath(path)}: ember reads GGUF files but does not write them")
    if fmt not in _SAVERS:
        raise StoreError(f"{os.fspath(path)}: unknown format {fmt!r}; expected one of {', '.join(FORMAT_NAMES)}")
    state, quantized = _split_quantized(state)
    if quantized and fmt == "torch":
        raise StoreError(f"{os.fspath(path)}: quantized tensors ({', '.join(quantized)}) are saved in native "
                         f"or safetensors files (PyTorch files hold no metadata for their schemes)")
    _SAVERS[fmt](path, state, {**(metadata or {}), **quantized} if quantized else metadata)


def load(path: str | os.PathLike, format: str | None = None, *, mmap: bool = True, key: str | None = None,
         prefix: str | None = None, rename: Sequence[tuple[str, str]] | None = None,
         cast: str | DType | Mapping | None = None) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Read `(state, metadata)` from `path`, then optionally narrow and adapt the state.

    Args:
        format: "native", "safetensors", "torch", "sharded" (an index `.json`) or "gguf"; by default
            sniffed from the file, then its extension.
        mmap: arrays are read-only views of the memory-mapped file (True) or of one in-memory copy.
        key: PyTorch files only: take this top-level entry of a checkpoint (e.g. "state_dict").
        prefix: keep only keys starting with it, and strip it (`remap.select(..., strip=True)`).
        rename: (regex, replacement) rules applied to every key in order (`remap.rename`).
        cast: a dtype for every float tensor, or a {source: target} dtype map (`remap.cast`).

    Example:
        >>> state, _ = load("pytorch_model.bin", prefix="encoder.", cast="f16")
    """
    # A write killed midway may have left temporary files beside the one asked for (ember.atomic).
    tidy(os.path.dirname(os.path.abspath(path)))
    fmt = format or detect_format(path, reading=True)
    if fmt == "torch":
        state, metadata = load_torch(path, mmap=mmap, key=key)
    elif key is not None:
        raise StoreError(f"{os.fspath(path)}: key= selects a checkpoint entry of PyTorch files; this is {fmt}")
    elif fmt == "native":
        state, metadata = load_native(path, mmap=mmap)
    elif fmt == "safetensors":
        state, metadata = load_safetensors(path, mmap=mmap)
    elif fmt == "sharded":
        state, metadata = load_sharded(path, mmap=mmap)
    elif fmt == "gguf":
        state, values = read_gguf(path, mmap=mmap)
        metadata = {k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}
    else:
        raise StoreError(f"{os.fspath(path)}: unknown format {fmt!r}; expected one of {', '.join(FORMAT_NAMES)}")
    state, metadata = _join_quantized(path, state, metadata)
    if prefix is not None:
        state = remap.select(state, prefix=prefix, strip=True)
    if rename:
        state = remap.rename(state, rename)
    if cast is not None:
        state = remap.cast(state, cast)
    return state, metadata
