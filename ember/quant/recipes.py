"""Quantizing a model: weight-only (`quantize_weights`; `quantize_gptq`, GPTQ on calibration batches),
dynamic (`quantize_dynamic`: int8 weights, per-token int8 activations), static (`quantize_static`: activations calibrated by observers on a few
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
from ..dtype import f32
from ..errors import QuantSchemeError
from ..qscheme import QuantScheme, int8
from ..tensor import Tensor
from .gptq import gptq_quantize
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
                     modules: Selector = None, embeddings: bool | None = None, method: str = "absmax") -> Module:
    """Replace the chosen `Linear` (and, with `embeddings`, `Embedding`) layers by `QuantLinear` /
    `QuantEmbedding` holding their weights quantized with `scheme` (frozen), scales by `method`
    ("absmax" or "mse"); a `QATLinear` becomes the `QuantLinear` of its trained weight. `embeddings`
    defaults to True for 8-bit schemes and False below (`default_embeddings`)."""
    if embeddings is None:
        embeddings = default_embeddings(scheme)
    kinds = (Linear, Embedding) if embeddings else (Linear,)
    for name, layer in _chosen(model, kinds, group, modules):
        new = (QuantEmbedding.from_embedding(layer, scheme, method) if isinstance(layer, Embedding) else
               QuantLinear.from_linear(layer, scheme, method))
        model = _replace(model, name, new)
    return model


def default_embeddings(scheme: QuantScheme) -> bool:
    """Whether `quantize_weights` quantizes Embedding tables by default: for codes of 8 bits, not for
    fewer (bitsandbytes and transformers keep embeddings in 16/32 bits at 4 bits; docs/quantization.md,
    "Accuracy")."""
    return scheme.bits >= 8


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


def _calibrate(model: Module, chosen: list, batches: Iterable, observe: Callable[[str, Tensor], None]) -> None:
    """Run `batches` through `model` (no gradients) calling `observe(name, input)` before each chosen layer."""
    handles = [layer.register_forward_pre_hook(lambda m, args, name=name: observe(name, args[0]))
               for name, layer in chosen]
    try:
        with no_grad():
            for batch in batches:
                _call(model, batch)
    finally:
        for handle in handles:
            handle.remove()


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
    _calibrate(model, chosen, batches, lambda name, x: observers[name].observe(x))
    for name, layer in chosen:
        scale, zero = observers[name].qparams(activations)
        new = QuantLinear.from_linear(layer, weights, input_scheme=activations, input_scale=scale, input_zero=zero)
        model = _replace(model, name, new)
    return model


def input_hessians(model: Module, batches: Iterable, group: ParamGroup | None = None,
                   modules: Selector = None) -> dict[str, Tensor]:
    """The f32 X^T X of the inputs X (all leading axes flattened) that each chosen Linear sees when
    `batches` run through `model`, summed over the batches, by layer name."""
    chosen = _chosen(model, (Linear,), group, modules)
    hessians: dict[str, Tensor] = {}

    def observe(name: str, x: Tensor) -> None:
        x = x.detach().cast(f32).reshape(-1, x.shape[-1])
        h = x.transpose(0, 1) @ x
        hessians[name] = h if name not in hessians else hessians[name] + h

    _calibrate(model, chosen, batches, observe)
    return hessians


def quantize_gptq(model: Module, batches: Iterable | None, scheme: QuantScheme, group: ParamGroup | None = None,
                  modules: Selector = None, damp: float = 0.01, act_order: bool = False, block_size: int = 128,
                  method: str = "absmax", hessians: dict[str, Tensor] | None = None) -> Module:
    """GPTQ post-training quantization (`ember.quant.gptq`): each chosen Linear's input Hessian is
    collected on `batches` (tensors, tuples or dicts of arguments; pad-free ones, as padding positions
    count as inputs) or taken from `hessians` (`input_hessians`' result, to quantize one calibration
    several ways), then its weight is quantized with `scheme` by `gptq_quantize(..., damp, act_order,
    block_size, method)` and the layer replaced by a `QuantLinear`. All layers see the float model's
    inputs (one calibration pass). Embeddings are left alone (`quantize_weights` does them)."""
    chosen = _chosen(model, (Linear,), group, modules)
    if hessians is None:
        hessians = input_hessians(model, batches, modules=lambda name, layer: any(layer is m for _, m in chosen))
    for name, layer in chosen:
        if name not in hessians:
            raise QuantSchemeError(f"{scheme}: GPTQ: layer {name!r} saw no input in the calibration batches")
        weight = gptq_quantize(layer.weight.value, hessians[name], scheme, damp, act_order, block_size, method)
        model = _replace(model, name, QuantLinear.from_linear(layer, weight))
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


__all__ = ["quantize_weights", "default_embeddings", "quantize_dynamic", "quantize_static", "input_hessians",
           "quantize_gptq", "prepare_qat", "weight_bytes"]
