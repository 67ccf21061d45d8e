"""`RMSprop`: gradients scaled by a running RMS, optionally centered and with momentum (PyTorch's
`torch.optim.RMSprop`)."""

from __future__ import annotations

from types import SimpleNamespace

from ..api.creation import zeros_like
from ..tensor import Tensor
from .optimizer import Optimizer


class RMSprop(Optimizer):
    r"""RMSprop (Hinton, 2012).

    Per step, with smoothing `alpha`:

        g   <- g + wd * p
        s   <- alpha * s + (1 - alpha) * g^2
        a   <- alpha * a + (1 - alpha) * g,   r = sqrt(s - a^2) + eps      (centered)
                                              r = sqrt(s) + eps            (otherwise)
        b   <- mu * b + g / r,  p <- p - lr * b                             (momentum mu > 0)
        p   <- p - lr * g / r                                               (otherwise)

    Options: `alpha=0.99`, `eps=1e-8`, `weight_decay=0`, `momentum=0`, `centered=False`.

    Example:
        >>> opt = RMSprop(model, lr=1e-2, momentum=0.9, centered=True)
        >>> opt.step(loss.backward())
    """

    defaults = {"alpha": 0.99, "eps": 1e-8, "weight_decay": 0.0, "momentum": 0.0, "centered": False}

    def check_options(self, options: SimpleNamespace, where: str) -> None:
        super().check_options(options, where)
        if not 0 <= options.alpha <= 1:
            raise ValueError(f"RMSprop{where}: alpha must be in [0, 1], got {options.alpha}")

    def update(self, value: Tensor, grad: Tensor, state: dict, options: SimpleNamespace, lr: float) -> Tensor:
        alpha = options.alpha
        if options.weight_decay:
            grad = grad + options.weight_decay * value
        if state["step"] == 1:
            state["square_avg"] = zeros_like(grad)
            if options.centered:
                state["grad_avg"] = zeros_like(grad)
            if options.momentum:
                state["momentum_buffer"] = zeros_like(grad)
        square_avg = state["square_avg"] = alpha * state["square_avg"] + (1 - alpha) * grad * grad
        if options.centered:
            grad_avg = state["grad_avg"] = alpha * state["grad_avg"] + (1 - alpha) * grad
            rms = (square_avg - grad_avg * grad_avg).sqrt() + options.eps
        else:
            rms = square_avg.sqrt() + options.eps
        if options.momentum:
            buf = state["momentum_buffer"] = options.momentum * state["momentum_buffer"] + grad / rms
            return value - lr * buf
        return value - lr * grad / rms
