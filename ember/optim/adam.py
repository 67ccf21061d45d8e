"""`Adam` (with AMSGrad) and `AdamW` (decoupled weight decay), as PyTorch's `torch.optim.Adam`/`AdamW`."""

from __future__ import annotations

from types import SimpleNamespace

from ..api.creation import zeros_like
from ..tensor import Tensor
from .fused import adam_scalars, adam_step
from .optimizer import Optimizer, check_betas


class Adam(Optimizer):
    r"""Adam (Kingma & Ba, 2015), optionally with AMSGrad.

    Per step t, with `(b1, b2) = betas`:

        g    <- g + wd * p                                   (coupled L2 weight decay)
        m    <- b1 * m + (1 - b1) * g
        v    <- b2 * v + (1 - b2) * g^2
        vmax <- max(vmax, v)   and use vmax for v below      (amsgrad)
        p    <- p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)

    Options: `betas=(0.9, 0.999)`, `eps=1e-8`, `weight_decay=0`, `amsgrad=False`.

    Each parameter's update is one op, `ember.optim.fused.adam_step` (one cube kernel; NumPy on
    Device.numpy()), in this order of operations; f16/bf16 parameters are computed in f32 and rounded
    where a value is stored (the parameter after weight decay, the decayed gradient, the moments). The
    moments are kept in the parameter's dtype.

    Example:
        >>> opt = Adam(model, lr=1e-3, amsgrad=True)
        >>> opt.step(loss.backward())
    """

    defaults = {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "amsgrad": False}
    decoupled_weight_decay = False

    def check_options(self, options: SimpleNamespace, where: str) -> None:
        super().check_options(options, where)
        check_betas(type(self).__name__ + where, options.betas, 2)

    def update(self, value: Tensor, grad: Tensor, state: dict, options: SimpleNamespace, lr: float) -> Tensor:
        """One op (`ember.optim.fused.adam_step`: a cube kernel, or NumPy on Device.numpy()) computes the
        new value and moments; the moments are views of its packed result."""
        t = state["step"]
        if t == 1:
            state["exp_avg"] = state["exp_avg_sq"] = zeros_like(value)
        if options.amsgrad and "max_exp_avg_sq" not in state:
            state["max_exp_avg_sq"] = zeros_like(value)
        scalars = adam_scalars(value, lr=lr, betas=options.betas, eps=options.eps, weight_decay=options.weight_decay,
                               decoupled=self.decoupled_weight_decay, step=t)
        new, state["exp_avg"], state["exp_avg_sq"], vmax = adam_step(
            value, grad, state["exp_avg"], state["exp_avg_sq"], state.get("max_exp_avg_sq") if options.amsgrad
            else None, scalars)
        if vmax is not None:
            state["max_exp_avg_sq"] = vmax
        return new


class AdamW(Adam):
    r"""Adam with decoupled weight decay (Loshchilov & Hutter, 2019).

    As `Adam`, except that weight decay shrinks the parameter instead of entering the gradient:

        p <- p * (1 - lr * wd)      before the Adam update, which then uses the raw gradient

    Options: `betas=(0.9, 0.999)`, `eps=1e-8`, `weight_decay=0.01`, `amsgrad=False`.

    Example:
        >>> opt = AdamW(model, lr=1e-3, weight_decay=0.01, groups=[ParamGroup(prefix="head.", lr=1e-2)])
        >>> opt.step(loss.backward())
    """

    defaults = {**Adam.defaults, "weight_decay": 0.01}
    decoupled_weight_decay = True
