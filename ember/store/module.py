"""Model files for modules: `save_module` writes a `Module`'s state, `load_module` reads one into it.

`save_module` writes every parameter and buffer as a host array with `ember.store.save`, recording
ember's version and the module's class in the metadata. `load_module` reads a file with
`ember.store.load` (narrowed by `prefix=`, renamed by `rename=`, cast by `cast=`), adapts it with
`adapter=` and loads it with `Module.load_state_dict`: each value moves to its parameter's device and
dtype, and the `LoadReport` lists missing, unexpected and mismatched keys (strict loading raises on any
of them and loads nothing). Nothing is dropped silently.

Every ember layer holds its weights in PyTorch's layout, so a PyTorch, Hugging Face or PEFT file of a
model built from the same layers under the same names loads with no adapter. `adapter="pytorch"`
(`from_pytorch`) renames the parts that ember names or groups differently (attention's packed
projections, the recurrent layers' per-layer weights, the transformer layers' feed-forward): the
table is in docs/store.md, "Loading PyTorch models"; no tensor is transposed.

Example:
    >>> save_module(model, "model.ember", metadata={"epoch": "3"})
    >>> load_module(Model(), "model.ember").ok
    True
    >>> load_module(LSTM(8, 16), "torch_lstm.pt", adapter="pytorch").ok
    True
"""

from __future__ import annotations

import os
from typing import Callable, Mapping, Sequence

import numpy as np

from .. import __version__
from ..api.quantize import QTensor
from ..dtype import DType
from ..errors import ShapeError, StoreError
from ..nn.attention import MultiHeadAttention
from ..nn.module import LoadReport, Module
from ..nn.rnn import Recurrent
from ..nn.transformer import PositionWiseFeedForward, TransformerDecoderLayer, TransformerEncoderLayer
from .formats import detect_format

__all__ = ["save_module", "load_module", "module_state", "from_pytorch", "ADAPTERS", "VERSION_KEY", "CLASS_KEY"]

State = dict[str, np.ndarray]
Adapter = Callable[[Module, State], State]

VERSION_KEY = "ember.version"
CLASS_KEY = "ember.module"


def module_state(module: Module) -> State:
    """Every parameter and buffer of `module` as a host array (a quantized weight as its `QTensor`), by
    dotted name (`Module.state_dict`).

    Example:
        >>> module_state(Linear(2, 3))["weight"].shape
        (3, 2)
    """
    return {name: tensor if isinstance(tensor, QTensor) else np.asarray(tensor.numpy())
            for name, tensor in module.state_dict().items()}


def save_module(module: Module, path: str | os.PathLike, metadata: Mapping[str, str] | None = None,
                format: str | None = None) -> None:
    """Write `module`'s parameters and buffers to `path` (atomically), in `format` or the one its
    extension names: `.ember`, `.safetensors`, `.pt`/`.pth`/`.bin`.

    The metadata gets `ember.version` and `ember.module` (the class name) beside the caller's
    entries. PyTorch files hold no metadata: for them nothing is recorded, and passing `metadata`
    raises `StoreError`.

    Example:
        >>> save_module(model, "model.safetensors", metadata={"epoch": "3"})
    """
    from . import save  # the package's front door imports this module before it defines save and load
    fmt = format or detect_format(path, reading=False)
    record = dict(metadata or {})
    if fmt != "torch":
        record.update({VERSION_KEY: __version__, CLASS_KEY: type(module).__qualname__})
    save(path, module_state(module), record, format=fmt)


def load_module(module: Module, path: str | os.PathLike, strict: bool = True, adapter: str | Adapter | None = None,
                rename: Sequence[tuple[str, str]] | None = None, prefix: str | None = None,
                cast: str | DType | Mapping | None = None) -> LoadReport:
    """Load the file at `path` into `module` (in place) and report what matched.

    Args:
        strict: raise on any missing, unexpected or shape-mismatched key and load nothing (the error
            names the file and lists every key, with both shapes for mismatches); with False, load
            the keys that fit and return the report.
        adapter: "pytorch" converts the names PyTorch gives the parts of attention, recurrent and
            transformer layers (see the module docs), or a function `(module, state) -> state`.
        rename: (regex, replacement) rules for the file's keys, applied before the adapter.
        prefix: keep only the file's keys starting with it, stripped (a sub-model's weights).
        cast: cast the file's float tensors (or a {source: target} dtype map) before loading; each
            value is cast to its parameter's dtype in any case.
    Returns the `LoadReport` (missing, unexpected, mismatched), in ember's names.

    Example:
        >>> report = load_module(model, "pytorch_model.bin", adapter="pytorch", prefix="encoder.", strict=False)
        >>> report.missing
        []
    """
    from . import load
    adapt = _adapter(adapter) if adapter is not None else None  # a bad name fails before the file is read
    state, _ = load(path, prefix=prefix, rename=rename, cast=cast)
    if adapt is not None:
        state = adapt(module, state)
    try:
        return module.load_state_dict(state, strict)
    except ShapeError as e:
        raise ShapeError("load_module", f"{os.fspath(path)}: {e}") from None
    except KeyError as e:
        raise KeyError(f"load_module: {os.fspath(path)}: {e.args[0]}") from None


def _adapter(adapter: str | Adapter) -> Adapter:
    if callable(adapter):
        return adapter
    if adapter not in ADAPTERS:
        raise ValueError(f"unknown adapter {adapter!r}; known: {', '.join(ADAPTERS)} or a function (module, state)")
    return ADAPTERS[adapter]


# ---- PyTorch layouts ------------------------------------------------------------------------------

def from_pytorch(module: Module, state: Mapping[str, np.ndarray]) -> State:
    """A PyTorch state dict in `module`'s names (see the module docs for the layers).

    Keys are looked up where PyTorch's equivalent of `module` keeps them; those no layer claims pass
    through unchanged (so `load_state_dict` reports them as unexpected), and ember keys the state
    lacks are simply absent (reported as missing). A packed q/k/v projection that cannot be split for
    the layer's width raises `ShapeError` naming the key and both shapes.

    Example:
        >>> sorted(from_pytorch(LSTM(3, 5), {"weight_ih_l0": np.zeros((20, 3), np.float32)}))
        ['layers.0.0.weight_ih']
    """
    pending = dict(state)
    out: State = {}
    _convert(module, "", "", pending, out)
    for key, array in pending.items():
        if key in out:
            raise StoreError(f"from_pytorch: {key!r} is both a PyTorch key no layer claims and the ember name of "
                             "a converted one")
        out[key] = array
    return out


def _convert(module: Module, ember: str, torch: str, pending: State, out: State) -> None:
    """Move `module`'s entries from `pending` (PyTorch names under `torch`) to `out` (ember names)."""
    for cls in type(module).__mro__:
        if cls in _CONVERTERS:
            _CONVERTERS[cls](module, ember, torch, pending, out)
            return
    torch_names = _TORCH_NAMES.get(type(module), {})
    # _entries: the module's own parameters, buffers and children, containers flattened ("layers.0")
    for name, value in module._entries():
        torch_name = torch_names.get(name, name)
        if isinstance(value, Module):
            # "" means PyTorch keeps the child's entries on the parent (the feed-forward's linears).
            _convert(value, f"{ember}{name}.", f"{torch}{torch_name}." if torch_name else torch, pending, out)
        else:
            _move(pending, torch + torch_name, out, ember + name)


def _move(pending: State, source: str, out: State, target: str) -> None:
    """`out[target] = pending.pop(source)` if the source exists (absent keys become missing ones)."""
    if source in pending:
        out[target] = pending.pop(source)


def _attention(module: MultiHeadAttention, ember: str, torch: str, pending: State, out: State) -> None:
    names = ("query", "key", "value")
    for suffix in ("weight", "bias"):
        packed = torch + f"in_proj_{suffix}"
        if packed in pending:
            for name, part in zip(names, _unpack(packed, pending.pop(packed), module.d_model)):
                out[f"{ember}{name}.{suffix}"] = part
    for name, letter in zip(names, "qkv"):  # PyTorch's unpacked form, when kdim or vdim differ from d_model
        _move(pending, f"{torch}{letter}_proj_weight", out, f"{ember}{name}.weight")
    _convert(module.output, ember + "output.", torch + "out_proj.", pending, out)


def _unpack(key: str, array: np.ndarray, d_model: int) -> list[np.ndarray]:
    """PyTorch's packed [q; k; v] rows, split in three."""
    if array.ndim not in (1, 2) or array.shape[0] != 3 * d_model:
        expected = f"({3 * d_model},)" if array.ndim == 1 else f"({3 * d_model}, {d_model})"
        raise ShapeError("from_pytorch", f"{key}: expected packed q/k/v of shape {expected} for d_model={d_model}, "
                                         f"found {array.shape}")
    return np.split(array, 3)


def _recurrent(module: Recurrent, ember: str, torch: str, pending: State, out: State) -> None:
    for layer, cells in enumerate(module.layers):
        for direction in range(len(cells)):
            suffix = f"_l{layer}" + ("_reverse" if direction else "")
            # ember's cells are `layers[layer][direction]`, so their state names are layers.L.D.*
            cell = f"{ember}layers.{layer}.{direction}."
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                _move(pending, torch + name + suffix, out, cell + name)


_CONVERTERS: dict[type, Callable[[Module, str, str, State, State], None]] = {
    MultiHeadAttention: _attention,
    Recurrent: _recurrent,
}

# Children whose PyTorch name differs from ember's, per layer ("" = kept on the parent in PyTorch).
_TORCH_NAMES: dict[type, dict[str, str]] = {
    TransformerEncoderLayer: {"ff": ""},
    TransformerDecoderLayer: {"ff": "", "cross_attn": "multihead_attn"},
    PositionWiseFeedForward: {"linear_inner": "linear1", "linear_outer": "linear2"},
}

ADAPTERS: dict[str, Adapter] = {"pytorch": from_pytorch}
