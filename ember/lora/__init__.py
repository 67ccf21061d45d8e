"""LoRA (Hu et al. 2021): train low-rank updates `W + (alpha / r) B A` of a frozen model's layers, with
adapters saved and loaded in PEFT's file format; QLoRA over a quantized base (docs/lora.md).

Example:
    >>> from ember.lora import LoraConfig, apply_lora, save_adapter, trainable_parameters
    >>> apply_lora(model, LoraConfig(rank=8, alpha=16, targets=["q_proj", "v_proj"]))
    >>> print(trainable_parameters(model))
    trainable params: 8,192 || all params: 1,244,672 || trainable%: 0.6582
    >>> save_adapter(model, "adapter/")
"""

from .config import LoraConfig
from .model import (
    TrainableReport, active_adapters, adapter_config, adapter_group, adapter_names, apply_lora, delete_adapter,
    disable_adapters, enable_adapters, lora_layers, merge_lora, set_adapter, trainable_parameters, unmerge_lora,
)
from .peft_files import adapter_state, load_adapter, read_adapter_config, save_adapter
from .qlora import apply_qlora

__all__ = [
    "LoraConfig", "TrainableReport", "active_adapters", "adapter_config", "adapter_group", "adapter_names",
    "apply_lora", "apply_qlora", "delete_adapter", "disable_adapters", "enable_adapters", "lora_layers", "merge_lora",
    "set_adapter", "trainable_parameters", "unmerge_lora", "adapter_state", "load_adapter",
    "read_adapter_config", "save_adapter",
]
