"""Quantizing a model: weight-only (`quantize_weights`), dynamic (`quantize_dynamic`: int8 weights,
per-token int8 activations), static (`quantize_static`: activations calibrated by observers on a few
batches, then frozen) and quantization-aware training (`prepare_qat`). Each replaces the chosen layers
in place (the model, or the replacement of a model that is itself a layer, is returned); the layers are
chosen by a `ParamGroup` matched against their weight's name and/or `modules`, a predicate on
(name, module) or a regex searched in the name. `weight_bytes` measures what the weights hold.

Example:
    >>> model = quantize_weights(model, int4(block=32), group=ParamGroup(prefix="encoder."))
"""

from __future__ import annotations

import re
from typing import Callable, Iterable

from ..api.quantize import QTensor
from ..autodiff.grad_mode import no_grad
from ..nn.embedding import Embedding
from ..nn.linear import Linear
from ..nn.module import Module, _set_attribute
from ..nn.param import ParamGroup
from ..qscheme import QuantScheme, int8
from .modules import QATLinear, QuantEmbedding, QuantLinear
from .observers import MinMaxObserver

Selector = Callable[[str, Module], bool] | str | None


def _chosen(model: Module, kinds: tuple[type, ...], group: ParamGroup | None, modules: Selector):
    """(name, layer) of the layers of `kinds` that `group` and `modules` select, collected first."""
    def wanted(name: str, layer: Module) -> bool:
        weight_name = f"{name}.weight" if name else "weight"
        if group is not None and not group.matches(weight_name, layer.weight):
            return False
        if isinstance(modules, str):
            return re.search(modules, name) is not None
        return modules is None or bool(modules(name, layer))

    return [(n, m) for n, m in model.named_modules() if isinstance(m, kinds) and wanted(n, m)]


def _replace(model: Module, name: str, layer: Module) -> Module:
    if not name:
        return layer
    _set_attribute(model, name, layer)
    return model


def quantize_weights(model: Module, scheme: QuantScheme, group: ParamGroup | None = None,
                     modules: Selector = None, embeddings: bool = True) -> Module:
    """Replace the chosen `Linear` (and, with `embeddings`, `Embedding`) layers by `QuantLinear` /
    `QuantEmbedding` holding their weights quantized with `scheme` (frozen); a `QATLinear` becomes
    the `QuantLinear` of its trained weight."""
    kinds = (Linear, Embedding) if embeddings else (Linear,)
    for name, layer in _chosen(model, kinds, group, modules):
        new = (QuantEmbedding.from_embedding(layer, scheme) if isinstance(layer, Embedding) else
               QuantLinear.from_linear(layer, scheme))
        model = _replace(model, name, new)
    return model


def quantize_dynamic(model: Module, weights: QuantScheme | None = None, activations: QuantScheme | None = None,
                     group: ParamGroup | None = None, modules: Selector = None) -> Module:
    """Linear layers with int8 per-channel weights and inputs quantized per token at run time (int8 by
    default)."""
    weights = weights or int8(axis=0)
    activations = activations or int8()
    for name, layer in _chosen(model, (Linear,), group, modules):
        model = _replace(model, name, QuantLinear.from_linear(layer, weights, input_scheme=activations))
    return model


def _call(model: Module, batch) -> None:
    if isinstance(batch, dict):
        model(**batch)
    elif isinstance(batch, (tuple, list)):
        model(*batch)
    else:
        model(batch)


def quantize_static(model: Module, batches: Iterable, weights: QuantScheme | None = None,
                    activations: QuantScheme | None = None, observer: Callable[[], object] = MinMaxObserver,
                    group: ParamGroup | None = None, modules: Selector = None) -> Module:
    """Post-training static quantization: run `batches` (tensors, tuples of arguments or dicts of keyword
    arguments) through `model` with an `observer()` on the input of each chosen Linear, then replace each
    by a `QuantLinear` whose input is quantized with the calibrated per-tensor scale (int8 weights per
    channel and int8 activations by default)."""
    weights = weights or int8(axis=0)
    activations = activations or int8()
    chosen = _chosen(model, (Linear,), group, modules)
    observers = {name: observer() for name, _ in chosen}
    handles = [layer.register_forward_pre_hook(lambda m, args, o=observers[name]: o.observe(args[0]))
               for name, layer in chosen]
    try:
        with no_grad():
            for batch in batches:
                _call(model, batch)
    finally:
        for handle in handles:
            handle.remove()
    for name, layer in chosen:
        scale, zero = observers[name].qparams(activations)
        new = QuantLinear.from_linear(layer, weights, input_scheme=activations, input_scale=scale, input_zero=zero)
        model = _replace(model, name, new)
    return model


def prepare_qat(model: Module, scheme: QuantScheme, input_scheme: QuantScheme | None = None,
                group: ParamGroup | None = None, modules: Selector = None) -> Module:
    """Wrap the chosen Linear layers as `QATLinear` (fake-quantized weight, and input with `input_scheme`);
    train, then `quantize_weights(model, scheme)` freezes them."""
    for name, layer in _chosen(model, (Linear,), group, modules):
        if not isinstance(layer, QATLinear):
            model = _replace(model, name, QATLinear(layer, scheme, input_scheme))
    return model


def weight_bytes(model: Module) -> int:
    """The bytes of the weights of the Linear and Embedding layers, quantized or not."""
    total = 0
    for _, layer in model.named_modules():
        if isinstance(layer, (Linear, Embedding, QuantLinear, QuantEmbedding)):
            w = layer.weight
            total += w.nbytes if isinstance(w, QTensor) else w.numel * w.dtype.itemsize
    return total


__all__ = ["quantize_weights", "quantize_dynamic", "quantize_static", "prepare_qat", "weight_bytes"]
