"""`Adan`: adaptive Nesterov momentum (Xie et al., 2022), following the official implementation
(github.com/sail-sg/Adan, `_single_tensor_adan`)."""

from __future__ import annotations

import math
from types import SimpleNamespace

from ..api.creation import zeros_like
from ..tensor import Tensor
from .optimizer import Optimizer, check_betas


class Adan(Optimizer):
    r"""Adan. With `(b1, b2, b3) = betas` and `t` from 1 (the previous gradient of step 1 is g itself,
    so the first difference is 0):

        d  <- g - g_prev
        m  <- b1 * m + (1 - b1) * g
        v  <- b2 * v + (1 - b2) * d
        n  <- b3 * n + (1 - b3) * (g + b2 * d)^2
        r  <- sqrt(n) / sqrt(1 - b3^t) + eps
        p  <- p - lr / (1 - b1^t) * m / r - lr * b2 / (1 - b2^t) * v / r
        p  <- p / (1 + lr * wd)                            (proximal weight decay, the default)
        or p <- p * (1 - lr * wd) before the update         (no_prox=True)

    The betas are the official code's (the paper writes 1 - beta). Options: `betas=(0.98, 0.92, 0.99)`,
    `eps=1e-8`, `weight_decay=0`, `no_prox=False`.

    Example:
        >>> opt = Adan(model, lr=1e-3, weight_decay=0.02)
        >>> opt.step(loss.backward())
    """

    defaults = {"betas": (0.98, 0.92, 0.99), "eps": 1e-8, "weight_decay": 0.0, "no_prox": False}

    def check_options(self, options: SimpleNamespace, where: str) -> None:
        super().check_options(options, where)
        check_betas("Adan" + where, options.betas, 3)

    def update(self, value: Tensor, grad: Tensor, state: dict, options: SimpleNamespace, lr: float) -> Tensor:
        b1, b2, b3 = options.betas
        t = state["step"]
        if t == 1:
            for key in ("exp_avg", "exp_avg_diff", "exp_avg_sq"):
                state[key] = zeros_like(grad)
            state["prev_grad"] = grad
        diff = grad - state["prev_grad"]
        m = state["exp_avg"] = b1 * state["exp_avg"] + (1 - b1) * grad
        v = state["exp_avg_diff"] = b2 * state["exp_avg_diff"] + (1 - b2) * diff
        nesterov = grad + b2 * diff
        n = state["exp_avg_sq"] = b3 * state["exp_avg_sq"] + (1 - b3) * nesterov * nesterov
        state["prev_grad"] = grad
        denom = n.sqrt() / math.sqrt(1 - b3 ** t) + options.eps
        step = (lr / (1 - b1 ** t)) * m / denom + (lr * b2 / (1 - b2 ** t)) * v / denom
        if options.no_prox:
            return value * (1 - lr * options.weight_decay) - step
        return (value - step) / (1 + lr * options.weight_decay)
