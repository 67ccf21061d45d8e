"""`LoraConfig`: the settings of one LoRA adapter, under ember's names with PEFT's meaning.

Example:
    >>> LoraConfig(rank=8, alpha=16, targets=["q_proj", "v_proj"]).scaling
    2.0
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Sequence

from ..nn.param import Param, ParamGroup

INITS = ("kaiming", "gaussian", "random")
BIASES = ("none", "all", "lora_only")


@dataclasses.dataclass(frozen=True)
class LoraConfig:
    """One adapter's settings.

    Args:
        rank: r, the inner width of B @ A (PEFT's `r`).
        alpha: the output is scaled by alpha / rank (alpha / sqrt(rank) with `rslora`).
        dropout: dropout on the adapter's input (not the base layer's) in training mode.
        targets: which layers get the adapter: module names (a module whose dotted name is one of them
            or ends with "." + one, PEFT's `target_modules` list), a regex string matched against the
            whole dotted name (PEFT's string form), or a `ParamGroup` (the layers owning a parameter it
            selects).
        init: "kaiming" (A Kaiming-uniform, B zero: PEFT's `init_lora_weights=True`), "gaussian"
            (A ~ N(0, 1/rank), B zero) or "random" (A and B both random, a nonzero adapter from the
            start: PEFT's `False`). Embeddings always start with A zero and B ~ N(0, 1), as in PEFT.
        rslora: rank-stabilised scaling alpha / sqrt(rank) (Kalajdzievski 2023, PEFT's `use_rslora`).
        bias: which biases train with the adapter: "none", "all" (every bias of the model) or
            "lora_only" (those of the adapted layers); they are saved with the adapter.
    """

    rank: int = 8
    alpha: float = 8.0
    dropout: float = 0.0
    targets: Sequence[str] | str | ParamGroup = ("q_proj", "v_proj")
    init: str = "kaiming"
    rslora: bool = False
    bias: str = "none"

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank <= 0:
            raise ValueError(f"LoraConfig: rank must be a positive int, got {self.rank!r}")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or self.alpha <= 0:
            raise ValueError(f"LoraConfig: alpha must be a positive number, got {self.alpha!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoraConfig: dropout must be in [0, 1), got {self.dropout!r}")
        if self.init not in INITS:
            raise ValueError(f"LoraConfig: init must be one of {INITS}, got {self.init!r}")
        if self.bias not in BIASES:
            raise ValueError(f"LoraConfig: bias must be one of {BIASES}, got {self.bias!r}")
        targets = self.targets
        if isinstance(targets, str):
            try:
                re.compile(targets)
            except re.error as e:
                raise ValueError(f"LoraConfig: targets {targets!r} is not a valid regex ({e})") from None
        elif isinstance(targets, ParamGroup):
            pass
        elif isinstance(targets, (list, tuple)) and targets and all(isinstance(t, str) and t for t in targets):
            object.__setattr__(self, "targets", tuple(targets))
        else:
            raise ValueError(f"LoraConfig: targets must be module names, a regex or a ParamGroup, got {targets!r}")

    @property
    def scaling(self) -> float:
        """The factor of the adapter's output: alpha / rank, or alpha / sqrt(rank) with `rslora`."""
        return self.alpha / (math.sqrt(self.rank) if self.rslora else self.rank)

    def selects(self, name: str, module) -> bool:
        """Whether the module at dotted `name` is a target."""
        targets = self.targets
        if isinstance(targets, str):
            return re.fullmatch(targets, name) is not None
        if isinstance(targets, ParamGroup):
            return any(targets.matches(f"{name}.{key}" if name else key, p)
                       for key, p in _own_parameters(module))
        return any(name == t or name.endswith("." + t) for t in targets)


def _own_parameters(module):
    """(name, Param) of the parameters held directly by `module` (not by its children)."""
    return [(k, v) for k, v in module._entries() if isinstance(v, Param)]
