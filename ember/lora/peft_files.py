"""Adapter files in PEFT's format: `adapter_config.json` and `adapter_model.safetensors`.

Keys are PEFT's: `base_model.model.<layer>.lora_A.weight` / `.lora_B.weight` (Linear, Conv2d),
`base_model.model.<layer>.lora_embedding_A` / `_B` (Embedding), and the trained biases
`base_model.model.<path>.bias`, with PEFT's shapes (A (r, in), B (out, r); A (r, num), B (dim, r)). A
model whose module names are its Hugging Face checkpoint's (ember.models' Llama and GPT-2) shares
adapters with `peft` both ways. Both files are written atomically (ember.atomic), the weights first.

Example:
    >>> save_adapter(model, "adapter/")
    >>> load_adapter(other_model, "adapter/", name="reloaded")
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ..api.creation import from_numpy
from ..atomic import write_atomic
from ..dtype import DType
from ..errors import ShapeError, StoreError
from ..nn.module import Module
from ..nn.param import ParamGroup
from ..store.safetensors import load_safetensors, save_safetensors
from . import layers
from .config import LoraConfig
from .model import active_adapters, adapter_config, apply_lora, delete_adapter, lora_layers, set_adapter

CONFIG_FILE, WEIGHTS_FILE = "adapter_config.json", "adapter_model.safetensors"
PREFIX = "base_model.model."


def adapter_state(model: Module, name: str = "default") -> dict[str, object]:
    """Adapter `name`'s parameters under their PEFT keys (the tensors themselves)."""
    config = adapter_config(model, name)
    state: dict[str, object] = {}
    for path, module in lora_layers(model):
        if name in layers.state_of(module).configs:
            for suffix, p in layers.adapter_tensors(module, name).items():
                state[f"{PREFIX}{path}.{suffix}"] = p
            if config.bias == "lora_only" and getattr(module, "bias", None) is not None:
                state[f"{PREFIX}{path}.bias"] = module.bias
    if config.bias == "all":
        state.update({PREFIX + n: p for n, p in model.named_parameters() if n == "bias" or n.endswith(".bias")})
    return state


def save_adapter(model: Module, directory: str | os.PathLike, name: str = "default",
                 base_model_name_or_path: str | None = None) -> None:
    """Write adapter `name` to `directory` (made if needed) as PEFT writes it (see the module docs)."""
    config = adapter_config(model, name)
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: np.ascontiguousarray(p.numpy()) for k, p in adapter_state(model, name).items()}
    save_safetensors(folder / WEIGHTS_FILE, state, {"format": "pt"})
    write_atomic(folder / CONFIG_FILE, json.dumps(_peft_config(model, config, name, base_model_name_or_path),
                                                  indent=2, sort_keys=True).encode())


def _peft_config(model: Module, config: LoraConfig, name: str, base: str | None) -> dict:
    targets = config.targets
    if isinstance(targets, ParamGroup):  # PEFT cannot hold a predicate: the layers it chose, by full name
        targets = sorted(p for p, m in lora_layers(model) if name in layers.state_of(m).configs)
    return {
        "peft_type": "LORA", "task_type": None, "base_model_name_or_path": base, "revision": None,
        "r": config.rank, "lora_alpha": config.alpha, "lora_dropout": config.dropout,
        "target_modules": targets if isinstance(targets, str) else list(targets),
        "bias": config.bias, "use_rslora": config.rslora,
        "init_lora_weights": {"kaiming": True, "gaussian": "gaussian", "random": False}[config.init],
        "fan_in_fan_out": False, "modules_to_save": None, "inference_mode": True, "use_dora": False,
        "layers_to_transform": None, "layers_pattern": None, "rank_pattern": {}, "alpha_pattern": {},
    }


def read_adapter_config(directory: str | os.PathLike) -> LoraConfig:
    """The `LoraConfig` of a PEFT adapter folder; settings ember does not implement raise `StoreError`."""
    path = Path(directory) / CONFIG_FILE
    if not path.is_file():
        raise StoreError(f"{path}: no {CONFIG_FILE}; not a PEFT adapter folder")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise StoreError(f"{path}: not valid JSON ({str(e)[:200]})") from None
    if not isinstance(data, dict) or data.get("peft_type") != "LORA":
        raise StoreError(f"{path}: peft_type {data.get('peft_type') if isinstance(data, dict) else data!r} "
                         "is not 'LORA'")
    unsupported = {k: data[k] for k in ("rank_pattern", "alpha_pattern", "use_dora", "fan_in_fan_out",
                                        "modules_to_save", "layers_to_transform") if data.get(k)}
    if unsupported:
        raise StoreError(f"{path}: settings ember's LoRA does not implement: {unsupported}")
    init = data.get("init_lora_weights", True)
    try:
        return LoraConfig(rank=data["r"], alpha=data["lora_alpha"], dropout=data.get("lora_dropout", 0.0),
                          targets=data["target_modules"], rslora=bool(data.get("use_rslora", False)),
                          bias=data.get("bias", "none"),
                          init={True: "kaiming", False: "random"}.get(init, "gaussian"))
    except (KeyError, ValueError, TypeError) as e:
        raise StoreError(f"{path}: {e}") from None


def load_adapter(model: Module, directory: str | os.PathLike, name: str = "default",
                 dtype: DType | str | None = None) -> Module:
    """Apply the adapter saved in `directory` to `model` as adapter `name` (active, as `apply_lora`, in
    `dtype`: over a quantized base, QLoRA's compute dtype) and load its weights. A key the model lacks, a key the file lacks, or a shape that differs (another
    rank, another base model) raises naming the key and the shapes, and leaves the model without it."""
    directory = Path(directory)
    config = read_adapter_config(directory)
    where = directory / WEIGHTS_FILE
    if not where.is_file():
        raise StoreError(f"{where}: no such file; the adapter's weights are missing")
    state, _ = load_safetensors(where, mmap=False)
    frozen = {id(p): p.frozen for p in model.parameters()}
    active = active_adapters(model)
    apply_lora(model, config, name, dtype=dtype)
    try:
        expected = adapter_state(model, name)
        missing = [f"{k} {tuple(p.shape)}" for k, p in expected.items() if k not in state]
        unexpected = [f"{k} {state[k].shape}" for k in state if k not in expected]
        if missing or unexpected:
            raise StoreError(f"{where}: does not fit the model's adapter: "
                             + "; ".join(part for part in (f"missing {missing}" if missing else "",
                                                           f"unexpected {unexpected}" if unexpected else "") if part))
        wrong = [f"{k}: file {state[k].shape}, model {tuple(p.shape)}" for k, p in expected.items()
                 if state[k].shape != tuple(p.shape)]
        if wrong:
            raise ShapeError("load_adapter", f"{where}: shapes differ (another rank or base model?): "
                                             + "; ".join(wrong))
        for key, p in expected.items():
            p.set(from_numpy(np.asarray(state[key]), p.device.inner).cast(p.dtype))
    except BaseException:
        delete_adapter(model, name)
        if active:
            set_adapter(model, active)
        model.freeze(ParamGroup(predicate=lambda n, p: frozen.get(id(p), True)))
        model.unfreeze(ParamGroup(predicate=lambda n, p: not frozen.get(id(p), True)))
        raise
    return model
