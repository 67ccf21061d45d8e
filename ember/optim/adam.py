"""`Adam` (with AMSGrad) and `AdamW` (decoupled weight decay), as PyTorch's `torch.optim.Adam`/`AdamW`."""

from __future__ import annotations

from types import SimpleNamespace

from ..api.creation import zeros_like
from ..api.shape import cat
from ..tensor import Tensor
from .fused import adam_scalars, adam_step, packed_rows
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
    moments are kept in the parameter's dtype, packed: `state[name]["packed"]` is the last step's result
    (rows: the parameter, exp_avg, exp_avg_sq and, with AMSGrad, max_exp_avg_sq), which the next step
    reads as it is; `state_dict()` saves the moments by name (`exp_avg`, `exp_avg_sq`, `max_exp_avg_sq`,
    as PyTorch names them) and `load_state_dict` packs them again.

    Example:
        >>> opt = Adam(model, lr=1e-3, amsgrad=True)
        >>> opt.step(loss.backward())
    """

    defaults = {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "amsgrad": False}
    decoupled_weight_decay = False
    moments = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")
    """The names of the packed result's rows after the parameter (the last with AMSGrad only)."""

    def check_options(self, options: SimpleNamespace, where: str) -> None:
        super().check_options(options, where)
        check_betas(type(self).__name__ + where, options.betas, 2)

    def update(self, value: Tensor, grad: Tensor, state: dict, options: SimpleNamespace, lr: float) -> Tensor:
        """One op (`ember.optim.fused.adam_step`: a cube kernel, or NumPy on Device.numpy()) computes the
        new value and moments, packed; the new value is a view of that result, kept whole as the state."""
        scalars = adam_scalars(value, lr=lr, betas=options.betas, eps=options.eps, weight_decay=options.weight_decay,
                               decoupled=self.decoupled_weight_decay, step=state["step"])
        new, state["packed"] = adam_step(value, grad, state.get("packed"), scalars, amsgrad=options.amsgrad)
        return new

    def saved_state(self, state: dict, shape: tuple, options: SimpleNamespace) -> dict:
        """The step count and the moments by name, split out of the packed result (its row 0, the
        parameter, is not saved: the module holds it)."""
        saved = {k: v for k, v in state.items() if k != "packed"}
        if "packed" in state:
            rows = packed_rows(state["packed"], shape, amsgrad=options.amsgrad)
            saved.update(zip(self.moments, rows[1:]))
        return saved

    def restored_state(self, saved: dict, value: Tensor, options: SimpleNamespace) -> dict:
        """The saved moments packed behind the parameter's value, as `update` reads them (a missing
        max_exp_avg_sq, from a run without AMSGrad, starts at zero as on a first step)."""
        state = {k: v for k, v in saved.items() if k not in self.moments}
        if "exp_avg" not in saved:
            return state
        rows = [saved["exp_avg"], saved["exp_avg_sq"]]
        if options.amsgrad:
            rows.append(saved.get("max_exp_avg_sq", zeros_like(value)))
        state["packed"] = cat([r.reshape(1) if not value.shape else r for r in (value, *rows)], dim=0)
        return state


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
