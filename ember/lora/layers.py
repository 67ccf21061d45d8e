"""LoRA on one layer: the adapters attached to a Linear, Embedding or Conv2d (or any Linear-like module),
their forward hook, and merging them into the base weight.

A layer keeps its class, parameters and names; `attach` adds PEFT's attributes to it, so its state-dict
names are PEFT's without `base_layer`:

    Linear, Linear-like:  lora_A.<name> = Linear(in, r), lora_B.<name> = Linear(r, out)   (no bias)
    Conv2d:               lora_A.<name> = Conv2d(in, r, kernel, stride, padding), lora_B.<name> = Conv2d(r, out, 1)
    Embedding:            lora_embedding_A.<name> = Param (r, num), lora_embedding_B.<name> = Param (dim, r)

and a forward hook adds `scaling * B(A(dropout(x)))` of each active adapter to the layer's output. A
Linear-like module is anything with `in_features`, `out_features` and `forward(x) -> (..., out)`, e.g. a
quantized Linear: the adapters never read the base weight, only merging does.

Example:
    >>> layer = Linear(4, 3)
    >>> attach(layer, "default", LoraConfig(rank=2, targets=["x"]))
    >>> sorted(n for n, _ in layer.named_parameters())
    ['bias', 'lora_A.default.weight', 'lora_B.default.weight', 'weight']
"""

from __future__ import annotations

import dataclasses

from ..api.quantize import QTensor
from ..dtype import DType
from ..errors import ShapeError
from ..nn import init
from ..nn.conv import Conv2d
from ..nn.dropout import dropout
from ..nn.embedding import Embedding
from ..nn.functional.embedding import embedding
from ..nn.linear import Linear
from ..nn.module import Module
from ..nn.param import Param
from ..tensor import Tensor
from .config import LoraConfig


@dataclasses.dataclass
class LoraState:
    """What a layer keeps about its adapters (a private attribute: no parameter, not saved)."""

    kind: str  # "linear", "embedding" or "conv2d"
    configs: dict[str, LoraConfig] = dataclasses.field(default_factory=dict)
    active: list[str] = dataclasses.field(default_factory=list)
    disabled: bool = False
    merged: list[str] = dataclasses.field(default_factory=list)
    original: Tensor | None = None  # the base weight before the first merge
    merged_value: Tensor | None = None  # the weight the last merge wrote


def kind_of(module: Module) -> str | None:
    """The kind of LoRA a module takes, or None when it takes none."""
    if isinstance(module, Embedding):
        return "embedding"
    if isinstance(module, Conv2d):
        return "conv2d"
    if isinstance(module, Linear) or (hasattr(module, "in_features") and hasattr(module, "out_features")):
        return "linear"
    return None


def state_of(module: Module) -> LoraState | None:
    """The module's `LoraState`, or None when it has no adapter."""
    return module.__dict__.get("_lora")


def attach(module: Module, name: str, config: LoraConfig, where: str = "", device=None,
           dtype: DType | None = None) -> None:
    """Add adapter `name` to `module` (see the module docs); `where` is its dotted name, for errors.
    The adapters go on `device` in `dtype` (default: those of the module's weight)."""
    kind = kind_of(module)
    if kind is None:
        raise TypeError(f"apply_lora: {where or 'the module'} is a {type(module).__name__}; LoRA adapts Linear, "
                        f"Embedding, Conv2d and Linear-like modules (with in_features and out_features)")
    state = state_of(module)
    if state is None:
        state = module._lora = LoraState(kind)
        module.register_forward_hook(_lora_hook)
    if name in state.configs:
        raise ValueError(f"apply_lora: {where} already has an adapter named {name!r}")
    weight = getattr(module, "weight", None)
    if device is None:
        device = weight.device if isinstance(weight, (Tensor, QTensor)) else None
    if dtype is None and isinstance(weight, Tensor) and weight.dtype.is_float:
        dtype = weight.dtype
    r = config.rank
    if kind == "embedding":
        a = init.zeros((r, module.num_embeddings), device, dtype)
        b = init.normal((module.embedding_dim, r), device=device, dtype=dtype)
        if config.init == "random":
            a = init.normal((r, module.num_embeddings), device=device, dtype=dtype)
        module.__dict__.setdefault("lora_embedding_A", {})[name] = Param(a)
        module.__dict__.setdefault("lora_embedding_B", {})[name] = Param(b)
    else:
        if kind == "conv2d":
            if module.groups != 1 or module.padding_mode != "zeros" or module.dilation != (1, 1):
                raise ValueError(f"apply_lora: {where} (Conv2d) has groups={module.groups}, dilation="
                                 f"{module.dilation}, padding_mode={module.padding_mode!r}; LoRA takes convolutions "
                                 f"with groups 1, dilation 1 and zero padding")
            a_layer = Conv2d(module.in_channels, r, module.kernel_size, module.stride, module.padding, bias=False,
                             device=device, dtype=dtype)
            b_layer = Conv2d(r, module.out_channels, 1, bias=False, device=device, dtype=dtype)
        else:
            a_layer = Linear(module.in_features, r, bias=False, device=device, dtype=dtype)
            b_layer = Linear(r, module.out_features, bias=False, device=device, dtype=dtype)
        # A keeps its layer's init, U(+-1/sqrt(fan_in)): PyTorch's, which is PEFT's kaiming_uniform(a=sqrt(5)).
        if config.init == "gaussian":
            a_layer.weight.set(init.normal(a_layer.weight.shape, std=1.0 / r, device=device, dtype=dtype))
        if config.init != "random":
            b_layer.weight.set(init.zeros(b_layer.weight.shape, device, dtype))
        module.__dict__.setdefault("lora_A", {})[name] = a_layer
        module.__dict__.setdefault("lora_B", {})[name] = b_layer
    state.configs[name] = config


def detach(module: Module, name: str) -> None:
    """Remove adapter `name` from `module` (unmerged first); a module left with none loses its LoRA attributes."""
    state = state_of(module)
    if name in state.merged:
        unmerge(module)
    for attribute in ("lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B"):
        getattr(module, attribute, {}).pop(name, None)
    del state.configs[name]
    state.active = [n for n in state.active if n != name]


def adapter_tensors(module: Module, name: str) -> dict[str, Param]:
    """The A and B parameters of adapter `name`, under their PEFT suffixes ("lora_A.weight", ...)."""
    if state_of(module).kind == "embedding":
        return {"lora_embedding_A": module.lora_embedding_A[name], "lora_embedding_B": module.lora_embedding_B[name]}
    return {"lora_A.weight": module.lora_A[name].weight, "lora_B.weight": module.lora_B[name].weight}


def _lora_hook(module: Module, args: tuple, output: Tensor) -> Tensor | None:
    """The forward hook: the base output plus each active, unmerged adapter's scaled update."""
    state = module._lora
    if state.disabled:
        return None
    x = args[0]
    for name in state.active:
        if name in state.merged:
            continue
        config = state.configs[name]
        if state.kind == "embedding":
            a, b = module.lora_embedding_A[name], module.lora_embedding_B[name]
            delta = embedding(x.to(a.device.inner), a.T, module.padding_idx) @ b.T
        else:
            inner = dropout(x, config.dropout, module.training) if config.dropout else x
            delta = module.lora_B[name](module.lora_A[name](inner.cast(_adapter_dtype(module, name))))
        output = output + (delta * config.scaling).cast(output.dtype)
    return output


def _adapter_dtype(module: Module, name: str) -> DType:
    return module.lora_A[name].weight.dtype


def delta_weight(module: Module, name: str) -> Tensor:
    """scaling * (B @ A) in the layout of the base weight (detached): what merging adds."""
    state = state_of(module)
    tensors = [t.detach() for t in adapter_tensors(module, name).values()]
    scaling = state.configs[name].scaling
    if state.kind == "embedding":
        a, b = tensors
        return (b @ a).T * scaling
    a, b = tensors
    if state.kind == "conv2d":
        out, r = b.shape[:2]
        return (b.reshape(out, r) @ a.reshape(r, -1)).reshape(module.weight.shape) * scaling
    return (b @ a) * scaling


def merge(module: Module, names: list[str]) -> None:
    """Add the adapters `names` into the base weight (the weight before the first merge is kept)."""
    state = state_of(module)
    weight = getattr(module, "weight", None)
    expected = {"linear": (getattr(module, "out_features", None), getattr(module, "in_features", None))}
    if not isinstance(weight, Param) or (state.kind == "linear" and weight.shape != expected["linear"]):
        raise ShapeError("merge_lora", f"a {type(module).__name__} has no dense weight of shape "
                                       f"{expected.get(state.kind)} to merge into; keep its adapters unmerged")
    if state.original is None:
        state.original = weight.value
    value = weight.value.detach()
    for name in names:
        if name not in state.merged:
            value = value + delta_weight(module, name).cast(value.dtype)
            state.merged.append(name)
    weight.set(value)
    state.merged_value = weight.value


def unmerge(module: Module) -> None:
    """Take every merged adapter out of the base weight: the kept original comes back bit for bit when the
    weight is still what merging wrote; otherwise (it was changed since) each update is subtracted."""
    state = state_of(module)
    if not state.merged:
        return
    weight = module.weight
    if state.merged_value is not None and weight._handle is state.merged_value._handle:
        weight.set(state.original)
    else:
        value = weight.value.detach()
        for name in state.merged:
            value = value - delta_weight(module, name).cast(value.dtype)
        weight.set(value)
    state.merged.clear()
    state.original = state.merged_value = None
