"""`Lion`: sign momentum (Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms"),
following the published pseudocode and google/automl's `lion_pytorch.py`."""

from __future__ import annotations

from types import SimpleNamespace

from ..api.creation import zeros_like
from ..tensor import Tensor
from .optimizer import Optimizer, check_betas


class Lion(Optimizer):
    r"""Lion. With `(b1, b2) = betas`:

        p <- p * (1 - lr * wd)
        p <- p - lr * sign(b1 * m + (1 - b1) * g)
        m <- b2 * m + (1 - b2) * g

    Every coordinate moves by exactly `lr`, so Lion wants an lr 3-10x smaller than AdamW's and a
    weight decay that much larger. Options: `betas=(0.9, 0.99)`, `weight_decay=0`.

    Example:
        >>> opt = Lion(model, lr=1e-4, weight_decay=0.1)
        >>> opt.step(loss.backward())
    """

    defaults = {"betas": (0.9, 0.99), "weight_decay": 0.0}

    def check_options(self, options: SimpleNamespace, where: str) -> None:
        super().check_options(options, where)
        check_betas("Lion" + where, options.betas, 2)

    def update(self, value: Tensor, grad: Tensor, state: dict, options: SimpleNamespace, lr: float) -> Tensor:
        b1, b2 = options.betas
        m = state["exp_avg"] if state["step"] > 1 else zeros_like(grad)
        value = value * (1 - lr * options.weight_decay)
        value = value - lr * (b1 * m + (1 - b1) * grad).sign()
        state["exp_avg"] = b2 * m + (1 - b2) * grad
        return value
