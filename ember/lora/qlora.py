r"""QLoRA (Dettmers et al. 2023): LoRA adapters trained over a base whose Linear weights are quantized.

`apply_qlora(model, config, scheme=nf4(block=64, double_quant=True), compute_dtype=bf16)` replaces
every `Linear` of the base (but those `keep` names, by default the output head `lm_head`) by a frozen
`QuantLinear` (`ember.quant.quantize_weights`), then attaches adapter `name` as `apply_lora` does,
with the adapters in `compute_dtype`. The adapters' gradients flow through the quantized layers'
input gradient; the base weights are never trained and stay quantized. Module names, and so PEFT
adapter files (`save_adapter`, `load_adapter`), are those of the unquantized model.

Example:
    >>> model = apply_qlora(model, LoraConfig(rank=16, alpha=32, targets=r".*\.(q|k|v|o)_proj"))
    >>> type(model.model.layers[0].self_attn.q_proj).__name__
    'QuantLinear'
"""

from __future__ import annotations

import re

from ..dtype import DType, bf16
from ..nn import Module
from ..qscheme import QuantScheme, nf4
from ..quant import quantize_weights
from .config import LoraConfig
from .model import apply_lora


def apply_qlora(model: Module, config: LoraConfig, scheme: QuantScheme | None = None,
                compute_dtype: DType | str = bf16, name: str = "default", keep: str = r"(^|\.)lm_head$") -> Module:
    """Quantize the base's Linear weights with `scheme` (all but the layers whose names match the regex
    `keep`) and attach LoRA adapter `name` in `compute_dtype`; returns the model."""
    scheme = scheme or nf4(block=64, double_quant=True)
    model = quantize_weights(model, scheme, modules=lambda path, layer: not re.search(keep, path),
                             embeddings=False)
    return apply_lora(model, config, name, dtype=compute_dtype)
