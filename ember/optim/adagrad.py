"""`AdaGrad`: per-coordinate learning rates from the running sum of squared gradients (PyTorch's
`torch.optim.Adagrad`)."""

from __future__ import annotations

from types import SimpleNamespace

from ..api.creation import full_like
from ..tensor import Tensor
from .optimizer import Optimizer


class AdaGrad(Optimizer):
    r"""AdaGrad (Duchi et al., 2011).

    Per step t (from 1):

        g   <- g + wd * p
        s   <- s + g^2                       (s starts at initial_accumulator_value)
        p   <- p - lr / (1 + (t - 1) * lr_decay) * g / (sqrt(s) + eps)

    Options: `lr_decay=0`, `weight_decay=0`, `initial_accumulator_value=0`, `eps=1e-10`.

    Example:
        >>> opt = AdaGrad(model, lr=1e-2)
        >>> opt.step(loss.backward())
    """

    defaults = {"lr_decay": 0.0, "weight_decay": 0.0, "initial_accumulator_value": 0.0, "eps": 1e-10}

    def check_options(self, options: SimpleNamespace, where: str) -> None:
        super().check_options(options, where)
        for key in ("lr_decay", "initial_accumulator_value"):
            if not getattr(options, key) >= 0:
                raise ValueError(f"AdaGrad{where}: {key} must be >= 0, got {getattr(options, key)}")

    def update(self, value: Tensor, grad: Tensor, state: dict, options: SimpleNamespace, lr: float) -> Tensor:
        t = state["step"]
        if options.weight_decay:
            grad = grad + options.weight_decay * value
        if t == 1:
            state["sum"] = full_like(grad, options.initial_accumulator_value)
        total = state["sum"] = state["sum"] + grad * grad
        step_lr = lr / (1 + (t - 1) * options.lr_decay)
        return value - step_lr * grad / (total.sqrt() + options.eps)
