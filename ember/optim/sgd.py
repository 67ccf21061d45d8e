"""`SGD`: stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay
(PyTorch's `torch.optim.SGD`)."""

from __future__ import annotations

from types import SimpleNamespace

from ..tensor import Tensor
from .optimizer import Optimizer


class SGD(Optimizer):
    r"""Stochastic gradient descent.

    With weight decay `wd`, momentum `mu`, dampening `tau` and learning rate `lr`, per step t:

        g   <- g + wd * p
        b_1 <- g;   b_t <- mu * b_{t-1} + (1 - tau) * g          (when mu > 0)
        d   <- g + mu * b_t  if nesterov  else  b_t              (d = g when mu = 0)
        p   <- p - lr * d

    Options: `momentum=0`, `dampening=0`, `nesterov=False`, `weight_decay=0` (Nesterov needs momentum
    > 0 and no dampening, as in PyTorch).

    Example:
        >>> opt = SGD(model, lr=0.1, momentum=0.9, nesterov=True)
        >>> opt.step(loss.backward())
    """

    defaults = {"momentum": 0.0, "dampening": 0.0, "nesterov": False, "weight_decay": 0.0}

    def check_options(self, options: SimpleNamespace, where: str) -> None:
        super().check_options(options, where)
        if options.nesterov and (options.momentum <= 0 or options.dampening != 0):
            raise ValueError(f"SGD{where}: nesterov needs momentum > 0 and dampening = 0, got "
                             f"momentum={options.momentum}, dampening={options.dampening}")

    def update(self, value: Tensor, grad: Tensor, state: dict, options: SimpleNamespace, lr: float) -> Tensor:
        if options.weight_decay:
            grad = grad + options.weight_decay * value
        if options.momentum:
            buf = state.get("momentum_buffer")
            buf = grad if buf is None else options.momentum * buf + (1 - options.dampening) * grad
            state["momentum_buffer"] = buf
            grad = grad + options.momentum * buf if options.nesterov else buf
        return value - lr * grad
