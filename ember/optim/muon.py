"""`Muon`: momentum orthogonalized by Newton-Schulz iterations, for 2-D parameters (Jordan et al.,
2024, "Muon: An optimizer for hidden layers in neural networks").

What we follow: the matrix update is PyTorch's `torch.optim.Muon` (itself Keller Jordan's reference
`muon.py`), with its defaults. Parameters that are not 2-D (biases, norms' scales, ...) go to
`AdamW` as in the reference's `MuonWithAuxAdam`, with that code's defaults for its Adam groups
(`lr=3e-4, betas=(0.9, 0.95), eps=1e-10, weight_decay=0`); pass `fallback={...}` to change them.
Embeddings and output heads are 2-D but the reference advises AdamW for them: give them a group,
`ParamGroup(prefix="head.", optimizer=AdamW, lr=3e-4)`. A parameter that is not 2-D always goes to
the fallback, unless a group hands it to another optimizer.

One difference from the reference, deliberate: Newton-Schulz runs in the parameter's dtype (the
reference casts to bf16 for speed on GPUs). Weights have PyTorch's (out, in) layout, so the shape
`(A, B)` that the lr adjustment reads is the parameter's own.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Sequence

from ..nn.module import Module
from ..nn.param import Param, ParamGroup
from ..tensor import Tensor
from .adam import AdamW
from .optimizer import Optimizer

# The reference's MuonWithAuxAdam defaults for the parameters Muon does not take.
FALLBACK_DEFAULTS = {"lr": 3e-4, "betas": (0.9, 0.95), "eps": 1e-10, "weight_decay": 0.0}

_ADJUST_LR = (None, "original", "match_rms_adamw")


def newton_schulz(g: Tensor, coefficients: tuple[float, float, float], steps: int, eps: float) -> Tensor:
    r"""An approximate orthogonalization `U S' V^T` of `g = U S V^T` (S' roughly in [0.5, 1.5]).

    On the wide orientation X of `g` (transposed if it has more rows than columns):

        X <- X / max(||X||_F, eps)
        repeat `steps` times:  A = X X^T;  X <- a X + (b A + c A A) X

    Example:
        >>> newton_schulz(ember.randn(4, 8), (3.4445, -4.7750, 2.0315), 5, 1e-7).shape
        (4, 8)
    """
    a, b, c = coefficients
    tall = g.shape[0] > g.shape[1]
    x = g.T if tall else g
    x = x / x.norm().clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    return x.T if tall else x


class Muon(Optimizer):
    r"""Muon for 2-D parameters, AdamW for the rest (see the module docs for what we follow).

    For a 2-D parameter, with momentum `mu` and PyTorch's lr adjustment for (out, in) = (A, B):

        b <- mu * b + (1 - mu) * g
        u <- (1 - mu) * g + mu * b   if nesterov  else  b
        O <- newton_schulz(u)
        p <- p * (1 - lr * wd) - lr' * O,   lr' = lr * sqrt(max(1, A / B))         ("original")
                                            lr' = lr * 0.2 * sqrt(max(A, B))        ("match_rms_adamw")

    Options: `momentum=0.95`, `nesterov=True`, `weight_decay=0.1`, `ns_coefficients=(3.4445, -4.7750,
    2.0315)`, `eps=1e-7`, `ns_steps=5`, `adjust_lr_fn=None` ("original"). `fallback`: AdamW options
    for the other parameters; its lr follows `opt.lr` by ratio, like any group's.

    Example:
        >>> opt = Muon(model, lr=0.02, fallback={"lr": 3e-4})
        >>> opt.step(loss.backward())
    """

    defaults = {"momentum": 0.95, "nesterov": True, "weight_decay": 0.1,
                "ns_coefficients": (3.4445, -4.7750, 2.0315), "eps": 1e-7, "ns_steps": 5, "adjust_lr_fn": None}

    def __init__(self, module: Module, lr: float = 1e-3, *, groups: Sequence[ParamGroup] = (),
                 fallback: dict | None = None, **kwargs) -> None:
        user_groups = list(groups)

        def not_matrix(name: str, param: Param) -> bool:
            # A user group that hands the parameter to another optimizer wins over the fallback.
            claimed = any(g.matches(name, param) and g.options.get("optimizer", Muon) is not Muon
                          for g in user_groups)
            return param.ndim != 2 and not claimed

        rest = ParamGroup(predicate=not_matrix, optimizer=AdamW, **{**FALLBACK_DEFAULTS, **(fallback or {})})
        select = kwargs.get("select")
        needed = any(not_matrix(n, p) for n, p in module.named_parameters()
                     if select is None or select.matches(n, p))
        super().__init__(module, lr, groups=[rest, *user_groups] if needed else user_groups, **kwargs)

    def check_options(self, options: SimpleNamespace, where: str) -> None:
        super().check_options(options, where)
        if options.adjust_lr_fn not in _ADJUST_LR:
            raise ValueError(f"Muon{where}: adjust_lr_fn must be one of {_ADJUST_LR}, got {options.adjust_lr_fn!r}")
        if not (isinstance(options.ns_steps, int) and 0 < options.ns_steps < 100):
            raise ValueError(f"Muon{where}: ns_steps must be an int in [1, 99], got {options.ns_steps!r}")
        if len(options.ns_coefficients) != 3:
            raise ValueError(f"Muon{where}: ns_coefficients must be 3 numbers, got {options.ns_coefficients!r}")

    def update(self, value: Tensor, grad: Tensor, state: dict, options: SimpleNamespace, lr: float) -> Tensor:
        if value.ndim != 2:
            raise ValueError(f"Muon: only 2-D parameters take Muon steps, got shape {value.shape}")
        mu = options.momentum
        buf = state.get("momentum_buffer")
        buf = state["momentum_buffer"] = (1 - mu) * grad if buf is None else mu * buf + (1 - mu) * grad
        direction = (1 - mu) * grad + mu * buf if options.nesterov else buf
        ortho = newton_schulz(direction, options.ns_coefficients, options.ns_steps, options.eps)
        return value * (1 - lr * options.weight_decay) - _adjusted_lr(lr, options.adjust_lr_fn, value.shape) * ortho


def _adjusted_lr(lr: float, how: str | None, shape: tuple[int, ...]) -> float:
    fan_out, fan_in = shape  # (A, B): a Linear weight's (out, in)
    if how == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(fan_out, fan_in))
    return lr * math.sqrt(max(1, fan_out / fan_in))
