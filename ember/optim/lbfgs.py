"""`LBFGS`: limited-memory BFGS over all trainable parameters as one flat vector, PyTorch's
`torch.optim.LBFGS` algorithm (from minFunc), with an optional strong-Wolfe line search."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

from ..api.creation import from_numpy, zeros
from ..api.shape import cat
from ..autodiff.gradients import Gradients
from ..nn.module import Module
from ..tensor import Tensor
from .line_search import strong_wolfe
from .optimizer import Optimizer

# closure() -> (loss, grads): re-evaluate the model at the parameters' current values
Closure = Callable[[], tuple[Any, Gradients]]

_HISTORY = ("old_dirs", "old_stps")


def _dot(a: Tensor, b: Tensor) -> float:
    return float((a * b).sum().item())


class LBFGS(Optimizer):
    r"""L-BFGS. Each `step(closure)` runs up to `max_iter` iterations on the flat parameter vector x:

        d = -H g                 H from the last `history_size` pairs (s = x_{k+1} - x_k, y = g_{k+1} - g_k)
                                 by the two-loop recursion, scaled by s.y / y.y of the newest pair
        x <- x + t d             t = lr (the first iteration ever: min(1, 1 / |g|_1) * lr), or the step
                                 the strong-Wolfe line search accepts (line_search_fn="strong_wolfe")

    It stops early when max|g| <= tolerance_grad, the step or the loss change is below
    tolerance_change, or `max_eval` (default max_iter * 5 // 4) evaluations are spent. A pair is kept
    only when s.y > 1e-10. There are no parameter groups, as in PyTorch.

    `closure()` evaluates the model at the current parameters and returns `(loss, grads)`: the loss
    (a tensor or number) and the `Gradients` of its backward pass. `step` returns the first loss.

    Options: `max_iter=20`, `max_eval=None`, `tolerance_grad=1e-7`, `tolerance_change=1e-9`,
    `history_size=100`, `line_search_fn=None`.

    Example:
        >>> opt = LBFGS(model, lr=1.0, line_search_fn="strong_wolfe")
        >>> def closure():
        ...     loss = loss_fn(model(x), y)
        ...     return loss, loss.backward()
        >>> opt.step(closure)
    """

    defaults = {"max_iter": 20, "max_eval": None, "tolerance_grad": 1e-7, "tolerance_change": 1e-9,
                "history_size": 100, "line_search_fn": None}

    def __init__(self, module: Module, lr: float = 1.0, **kwargs) -> None:
        if kwargs.get("groups"):
            raise ValueError("LBFGS: parameter groups are not supported (one set of options for the whole "
                             "flat parameter vector, as in PyTorch)")
        super().__init__(module, lr, **kwargs)

    def check_options(self, options: SimpleNamespace, where: str) -> None:
        super().check_options(options, where)
        if options.line_search_fn not in (None, "strong_wolfe"):
            raise ValueError(f"LBFGS: line_search_fn must be None or 'strong_wolfe', got {options.line_search_fn!r}")
        if options.max_eval is None:
            options.max_eval = options.max_iter * 5 // 4
        for key in ("max_iter", "max_eval", "history_size"):
            value = getattr(options, key)
            if not (isinstance(value, int) and value > 0):
                raise ValueError(f"LBFGS: {key} must be a positive int, got {value!r}")

    # ---- the flat parameter vector ---------------------------------------------------------------
    def _trainable(self):
        return [e for e in self._entries if not e.param.frozen]

    def _flat_grad(self, grads: Gradients) -> Tensor:
        if not isinstance(grads, Gradients):
            raise TypeError(f"LBFGS: the closure must return (loss, Gradients), got {type(grads).__name__} "
                            f"for the gradients")
        parts = []
        for entry in self._trainable():
            g = entry.param.grad(grads)
            value = entry.param.value
            parts.append(zeros(value.numel, dtype=value.dtype, device=value.device.inner) if g is None
                         else g.cast(value.dtype).reshape(-1))
        return cat(parts)

    def _values(self) -> list[Tensor]:
        return [e.param.value.inner() for e in self._trainable()]

    def _set_values(self, values: list[Tensor]) -> None:
        for entry, value in zip(self._trainable(), values):
            entry.param.set(value)

    def _moved(self, base: list[Tensor], t: float, d: Tensor) -> list[Tensor]:
        out, offset = [], 0
        for value in base:
            out.append(value + t * d[offset:offset + value.numel].reshape(value.shape))
            offset += value.numel
        return out

    def _evaluate(self, closure: Closure) -> tuple[float, Tensor]:
        result = closure()
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError("LBFGS: the closure must return (loss, grads)")
        loss, grads = result
        return float(loss.item() if isinstance(loss, Tensor) else loss), self._flat_grad(grads)

    # ---- the algorithm ---------------------------------------------------------------------------
    def step(self, closure: Closure) -> float:  # type: ignore[override]  (a closure, as PyTorch's LBFGS)
        """Run up to `max_iter` L-BFGS iterations (see the class docs); returns the loss before them.

        Example:
            >>> opt.step(lambda: (loss := loss_fn(model(x), y), loss.backward()))
        """
        if not callable(closure):
            raise TypeError("LBFGS.step takes a closure returning (loss, grads), not the Gradients themselves")
        if not self._trainable():
            raise ValueError("LBFGS: the module has no trainable parameters")
        o = self._trainable()[0].options
        lr = self._lr
        state = self.state.setdefault("lbfgs", {"func_evals": 0, "n_iter": 0})
        self.steps += 1
        orig_loss, flat_grad = self._evaluate(closure)
        loss = orig_loss
        evals = 1
        state["func_evals"] += 1
        if float(flat_grad.abs().max().item()) <= o.tolerance_grad:
            return orig_loss
        d, t = state.get("d"), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
        h_diag, prev_flat_grad = state.get("H_diag"), state.get("prev_flat_grad")
        n_iter = 0
        while n_iter < o.max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                d, old_dirs, old_stps, ro, h_diag = -flat_grad, [], [], [], 1.0
            else:
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = _dot(y, s)
                if ys > 1e-10:
                    if len(old_dirs) == o.history_size:
                        old_dirs.pop(0), old_stps.pop(0), ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    h_diag = ys / _dot(y, y)
                d = _two_loop(-flat_grad, old_dirs, old_stps, ro, h_diag)
            prev_flat_grad, prev_loss = flat_grad, loss
            t = min(1.0, 1.0 / float(flat_grad.abs().sum().item())) * lr if state["n_iter"] == 1 else lr
            gtd = _dot(flat_grad, d)
            if gtd > -o.tolerance_change:  # not a descent direction
                break
            used = 0
            if o.line_search_fn is not None:
                start = self._values()

                def along(step: float) -> tuple[float, Tensor]:
                    self._set_values(self._moved(start, step, d))
                    try:
                        return self._evaluate(closure)
                    finally:
                        self._set_values(start)

                loss, flat_grad, t, used = strong_wolfe(along, t, d, loss, flat_grad, gtd,
                                                        max_ls=o.max_eval - evals)
                self._set_values(self._moved(start, t, d))
                converged = float(flat_grad.abs().max().item()) <= o.tolerance_grad
            else:
                self._set_values(self._moved(self._values(), t, d))
                converged = False
                if n_iter != o.max_iter:  # the last iteration's loss is the next step's first evaluation
                    loss, flat_grad = self._evaluate(closure)
                    converged = float(flat_grad.abs().max().item()) <= o.tolerance_grad
                    used = 1
            evals += used
            state["func_evals"] += used
            if n_iter == o.max_iter or evals >= o.max_eval or converged:
                break
            if float((d * t).abs().max().item()) <= o.tolerance_change or abs(loss - prev_loss) < o.tolerance_change:
                break
        state.update({"d": d, "t": t, "old_dirs": old_dirs, "old_stps": old_stps, "ro": ro, "H_diag": h_diag,
                      "prev_flat_grad": prev_flat_grad, "prev_loss": prev_loss})
        return orig_loss

    # ---- state -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The history as host arrays over the flat vector, with its `layout` (parameter names and
        shapes, in order) so a load can check it lines up with the model.

        Example:
            >>> opt.state_dict()["layout"]
            [['l1.weight', [4, 8]], ...]
        """
        state = self.state.get("lbfgs", {})
        host = {k: ([np.array(t.numpy()) for t in v] if k in _HISTORY else
                    np.array(v.numpy()) if isinstance(v, Tensor) else (list(v) if isinstance(v, list) else v))
                for k, v in state.items()}
        return {"optimizer": "LBFGS", "lr": self._lr, "steps": self.steps, "layout": self._layout(), "state": host}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict` saved from a model with the same trainable parameters."""
        if state.get("optimizer") != "LBFGS":
            raise ValueError(f"LBFGS.load_state_dict: the state is of optimizer {state.get('optimizer')!r}")
        layout = [[name, list(shape)] for name, shape in state["layout"]]
        if layout != self._layout():
            raise ValueError(f"LBFGS.load_state_dict: the state's parameters {layout} differ from this "
                             f"model's {self._layout()}")
        value = self._trainable()[0].param
        device, dtype = value.device.inner, value.dtype

        def tensor(array) -> Tensor:
            return from_numpy(np.array(array, dtype=dtype.np), device)

        restored = {k: ([tensor(a) for a in v] if k in _HISTORY else
                        tensor(v) if k in ("d", "prev_flat_grad") and v is not None else v)
                    for k, v in state["state"].items()}
        self.state = {"lbfgs": restored} if restored else {}
        self.steps, self.lr = int(state["steps"]), state["lr"]

    def _layout(self) -> list:
        return [[e.name, list(e.param.shape)] for e in self._trainable()]


def _two_loop(q: Tensor, dirs: list[Tensor], stps: list[Tensor], ro: list[float], h_diag: float) -> Tensor:
    """`H q` for the L-BFGS inverse-Hessian estimate H (Nocedal & Wright, Algorithm 7.4)."""
    al = [0.0] * len(dirs)
    for i in range(len(dirs) - 1, -1, -1):
        al[i] = _dot(stps[i], q) * ro[i]
        q = q - al[i] * dirs[i]
    r = q * h_diag
    for i in range(len(dirs)):
        be_i = _dot(dirs[i], r) * ro[i]
        r = r + (al[i] - be_i) * stps[i]
    return r
