"""LoRA on a whole model: `apply_lora` and the functions that manage its adapters.

`apply_lora(model, config, name)` attaches adapter `name` to every layer `config.targets` selects
(`ember.lora.layers`), makes it the active one and freezes every other parameter (but the biases
`config.bias` trains). Base parameters keep their names and values; the adapters' are PEFT's
(`<layer>.lora_A.<name>.weight`, ...). Unfreeze a head after `apply_lora` to train it too.

Example:
    >>> apply_lora(model, LoraConfig(rank=8, alpha=16, targets=["q_proj", "v_proj"]))
    >>> print(trainable_parameters(model))
    trainable params: 8,192 || all params: 1,244,672 || trainable%: 0.6582
    >>> opt = AdamW(model, lr=1e-3, groups=[adapter_group(lr=2e-3, weight_decay=0.0)])
"""

from __future__ import annotations

import re
from typing import Iterator, NamedTuple, Sequence

from ..dtype import DType
from ..nn.module import Module
from ..nn.param import ParamGroup
from . import layers
from .config import LoraConfig

_LORA_NAME = re.compile(r"(^|\.)lora_(A|B|embedding_A|embedding_B)\.")


def lora_layers(model: Module) -> Iterator[tuple[str, Module]]:
    """(dotted name, layer) of every layer carrying a LoRA adapter."""
    for name, module in model.named_modules():
        if layers.state_of(module) is not None:
            yield name, module


def adapter_names(model: Module) -> list[str]:
    """The names of the model's adapters, sorted."""
    return sorted({n for _, module in lora_layers(model) for n in layers.state_of(module).configs})


def active_adapters(model: Module) -> list[str]:
    """The names of the active adapters."""
    names: dict[str, None] = {}
    for _, module in lora_layers(model):
        names.update(dict.fromkeys(layers.state_of(module).active))
    return list(names)


def apply_lora(model: Module, config: LoraConfig, name: str = "default", dtype: DType | str | None = None) -> Module:
    """Attach adapter `name` to the layers `config.targets` selects, activate it and freeze the rest
    (see the module docs); returns `model`. `dtype`: the adapters' (default: each base weight's).

    Module names and regexes must select only layers LoRA adapts; a `ParamGroup` may select any parameters
    and takes the adaptable layers among their owners. No selected layer at all raises `ValueError`.
    """
    if not isinstance(config, LoraConfig):
        raise TypeError(f"apply_lora takes a LoraConfig, got {type(config).__name__}")
    if not name or not isinstance(name, str) or "." in name:
        raise ValueError(f"apply_lora: an adapter name is a non-empty string without dots, got {name!r}")
    if name in adapter_names(model):
        raise ValueError(f"apply_lora: the model already has an adapter named {name!r}")
    chosen = []
    for path, module in model.named_modules():
        if _LORA_NAME.search(path + ".") or not path or not config.selects(path, module):
            continue
        if layers.kind_of(module) is None:
            if isinstance(config.targets, ParamGroup):
                continue
            raise TypeError(f"apply_lora: target {path} is a {type(module).__name__}; LoRA adapts Linear, "
                            f"Embedding, Conv2d and Linear-like modules (with in_features and out_features)")
        chosen.append((path, module))
    if not chosen:
        shown = [p for p, _ in model.named_modules() if p][:20]
        raise ValueError(f"apply_lora: targets {config.targets!r} select no layer of this "
                         f"{type(model).__name__}; its modules are {shown}")
    if any(layers.state_of(m) is not None and layers.state_of(m).merged for _, m in lora_layers(model)):
        raise ValueError("apply_lora: unmerge_lora(model) first: the model has merged adapters")
    for path, module in chosen:
        layers.attach(module, name, config, path, dtype=dtype)
    set_adapter(model, name)
    return model


def set_adapter(model: Module, names: str | Sequence[str]) -> None:
    """Make `names` the active adapters (their outputs add up) and the trainable parameters: every other
    parameter is frozen, but the biases the active adapters' `bias` setting trains."""
    names = [names] if isinstance(names, str) else list(names)
    known = adapter_names(model)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"set_adapter: no adapter {unknown} on this model; it has {known}")
    trained: set[int] = set()
    for _, module in lora_layers(model):
        state = layers.state_of(module)
        if state.merged:
            raise ValueError("set_adapter: unmerge_lora(model) first: merged adapters cannot be switched")
        state.active = [n for n in names if n in state.configs]
        for n in state.active:
            trained.update(id(p) for p in layers.adapter_tensors(module, n).values())
            if state.configs[n].bias == "lora_only" and getattr(module, "bias", None) is not None:
                trained.add(id(module.bias))
    if any(c.bias == "all" for c in _configs(model, names)):
        trained.update(id(p) for n, p in model.named_parameters() if n == "bias" or n.endswith(".bias"))
    model.freeze(ParamGroup(predicate=lambda n, p: id(p) not in trained))
    model.unfreeze(ParamGroup(predicate=lambda n, p: id(p) in trained))


def _configs(model: Module, names: Sequence[str]) -> list[LoraConfig]:
    found = {}
    for _, module in lora_layers(model):
        for n, c in layers.state_of(module).configs.items():
            if n in names:
                found[n] = c
    return list(found.values())


def adapter_config(model: Module, name: str = "default") -> LoraConfig:
    """The `LoraConfig` adapter `name` was applied with."""
    configs = _configs(model, [name])
    if not configs:
        raise ValueError(f"no adapter {name!r} on this model; it has {adapter_names(model)}")
    return configs[0]


def delete_adapter(model: Module, name: str) -> None:
    """Remove adapter `name` from every layer (unmerging first)."""
    adapter_config(model, name)
    for _, module in lora_layers(model):
        if name in layers.state_of(module).configs:
            layers.detach(module, name)


class _Disabled:
    """What `disable_adapters` returns: as a context manager, it enables them again on exit."""

    def __init__(self, model: Module) -> None:
        self.model = model

    def __enter__(self) -> Module:
        return self.model

    def __exit__(self, *exc) -> None:
        enable_adapters(self.model)


def disable_adapters(model: Module) -> _Disabled:
    """Run the base model alone (merged adapters are unmerged first), until `enable_adapters` or the end
    of the `with` block.

    Example:
        >>> with disable_adapters(model):
        ...     base_logits = model(x)
    """
    unmerge_lora(model)
    for _, module in lora_layers(model):
        layers.state_of(module).disabled = True
    return _Disabled(model)


def enable_adapters(model: Module) -> None:
    """Undo `disable_adapters`."""
    for _, module in lora_layers(model):
        layers.state_of(module).disabled = False


def merge_lora(model: Module, names: str | Sequence[str] | None = None) -> None:
    """Add adapters `names` (default: the active ones) into their layers' base weights, so the model runs
    at the base's cost; `unmerge_lora` takes them out again."""
    names = None if names is None else ([names] if isinstance(names, str) else list(names))
    for _, module in lora_layers(model):
        state = layers.state_of(module)
        chosen = [n for n in (state.active if names is None else names) if n in state.configs]
        if chosen:
            layers.merge(module, chosen)


def unmerge_lora(model: Module) -> None:
    """Take every merged adapter out of the base weights: each base weight comes back bit for bit unless
    it was changed after merging (then the updates are subtracted, exact up to rounding)."""
    for _, module in lora_layers(model):
        layers.unmerge(module)


def adapter_group(**options) -> ParamGroup:
    """A `ParamGroup` of every LoRA parameter, with optimizer options (`lr`, `weight_decay`, ...).

    Example:
        >>> AdamW(model, lr=1e-4, groups=[adapter_group(lr=1e-3, weight_decay=0.0)])
    """
    return ParamGroup(predicate=lambda name, p: _LORA_NAME.search(name) is not None, **options)


class TrainableReport(NamedTuple):
    """Trainable and total parameter elements; prints as PEFT's `print_trainable_parameters`."""

    trainable: int
    total: int

    @property
    def percent(self) -> float:
        return 100.0 * self.trainable / self.total if self.total else 0.0

    def __str__(self) -> str:
        return f"trainable params: {self.trainable:,} || all params: {self.total:,} || trainable%: {self.percent:.4f}"


def trainable_parameters(model: Module) -> TrainableReport:
    """How many parameter elements train (unfrozen) out of all of them, adapters included."""
    return TrainableReport(model.num_params(trainable_only=True), model.num_params())
