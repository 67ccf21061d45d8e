"""`LBFGS`: limited-memory BFGS over all trainable parameters as one flat vector, PyTorch's
`torch.optim.LBFGS` algorithm (from minFunc), with an optional strong-Wolfe line search."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
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

_VECTOR_LISTS = ("old_dirs", "old_stps")


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
        max_iter = kwargs.get("max_iter", self.defaults["max_iter"])
        if kwargs.get("max_eval") is None and isinstance(max_iter, int):  # PyTorch's default
            kwargs["max_eval"] = max_iter * 5 // 4
        super().__init__(module, lr, **kwargs)
        self.history = _History()

    def check_options(self, options: SimpleNamespace, where: str) -> None:
        super().check_options(options, where)
        if options.line_search_fn not in (None, "strong_wolfe"):
            raise ValueError(f"LBFGS: line_search_fn must be None or 'strong_wolfe', got {options.line_search_fn!r}")
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
    def step(self, closure: Closure) -> float:  # type: ignore[override]  # a closure, as PyTorch's LBFGS
        """Run up to `max_iter` L-BFGS iterations (see the class docs); returns the loss before them.

        Example:
            >>> opt.step(lambda: (loss := loss_fn(model(x), y), loss.backward()))
        """
        if not callable(closure):
            raise TypeError("LBFGS.step takes a closure returning (loss, grads), not the Gradients themselves")
        if not self._trainable():
            raise ValueError("LBFGS: the module has no trainable parameters")
        o = self.options
        h = self.history
        self.steps += 1
        orig_loss, flat_grad = self._evaluate(closure)
        loss, evals = orig_loss, 1
        h.func_evals += 1
        if _max_abs(flat_grad) <= o.tolerance_grad:
            return orig_loss
        for n_iter in range(1, o.max_iter + 1):
            h.n_iter += 1
            h.d = h.direction(flat_grad, o.history_size)
            h.prev_flat_grad, h.prev_loss = flat_grad, loss
            h.t = min(1.0, 1.0 / float(flat_grad.abs().sum().item())) * self._lr if h.n_iter == 1 else self._lr
            gtd = _dot(flat_grad, h.d)
            if gtd > -o.tolerance_change:  # not a descent direction
                break
            if o.line_search_fn is not None:
                loss, flat_grad, used = self._line_search(closure, loss, flat_grad, gtd, o.max_eval - evals)
                converged = _max_abs(flat_grad) <= o.tolerance_grad
            else:
                self._set_values(self._moved(self._values(), h.t, h.d))
                converged, used = False, 0
                if n_iter != o.max_iter:  # the last iteration's loss is the next step's first evaluation
                    loss, flat_grad = self._evaluate(closure)
                    converged, used = _max_abs(flat_grad) <= o.tolerance_grad, 1
            evals += used
            h.func_evals += used
            if n_iter == o.max_iter or evals >= o.max_eval or converged:
                break
            if _max_abs(h.d * h.t) <= o.tolerance_change or abs(loss - h.prev_loss) < o.tolerance_change:
                break
        return orig_loss

    def _line_search(self, closure: Closure, loss: float, flat_grad: Tensor, gtd: float,
                     max_ls: int) -> tuple[float, Tensor, int]:
        """Move to the step the strong-Wolfe search accepts along `history.d`; (loss, grad, evaluations)."""
        h = self.history
        start = self._values()

        def along(t: float) -> tuple[float, Tensor]:
            self._set_values(self._moved(start, t, h.d))
            try:
                return self._evaluate(closure)
            finally:
                self._set_values(start)

        loss, flat_grad, h.t, used = strong_wolfe(along, h.t, h.d, loss, flat_grad, gtd, max_ls=max_ls)
        self._set_values(self._moved(start, h.t, h.d))
        return loss, flat_grad, used

    # ---- state -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The history as host arrays over the flat vector, with its `layout` (parameter names and
        shapes, in order) so a load can check it lines up with the model.

        Example:
            >>> opt.state_dict()["layout"]
            [['l1.weight', [4, 8]], ...]
        """
        return {"optimizer": "LBFGS", "lr": self._lr, "steps": self.steps, "layout": self._layout(),
                "history": self.history.to_host()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict` saved from a model with the same trainable parameters."""
        if state.get("optimizer") != "LBFGS":
            raise ValueError(f"LBFGS.load_state_dict: the state is of optimizer {state.get('optimizer')!r}")
        layout = [[name, list(shape)] for name, shape in state["layout"]]
        if layout != self._layout():
            raise ValueError(f"LBFGS.load_state_dict: the state's parameters {layout} differ from this "
                             f"model's {self._layout()}")
        like = self._trainable()[0].param
        self.history = _History.from_host(state["history"], like.device.inner, like.dtype)
        self.steps, self.lr = int(state["steps"]), state["lr"]

    def _layout(self) -> list:
        return [[e.name, list(e.param.shape)] for e in self._trainable()]


@dataclass
class _History:
    """What L-BFGS carries from step to step (PyTorch's state keys): the last direction `d` and step
    `t`, the (y, s) pairs with ro = 1 / y.s, the scaling of the initial Hessian, and counters."""

    func_evals: int = 0
    n_iter: int = 0
    d: Tensor | None = None
    t: float = 0.0
    old_dirs: list[Tensor] = field(default_factory=list)
    old_stps: list[Tensor] = field(default_factory=list)
    ro: list[float] = field(default_factory=list)
    h_diag: float = 1.0
    prev_flat_grad: Tensor | None = None
    prev_loss: float = 0.0

    def direction(self, flat_grad: Tensor, history_size: int) -> Tensor:
        """Record the newest pair (kept when y.s > 1e-10, the oldest dropped past `history_size`) and
        return the quasi-Newton direction `-H g`; plain steepest descent on the very first iteration."""
        if self.n_iter == 1:
            self.old_dirs, self.old_stps, self.ro, self.h_diag = [], [], [], 1.0
            return -flat_grad
        y = flat_grad - self.prev_flat_grad
        s = self.d * self.t
        ys = _dot(y, s)
        if ys > 1e-10:
            if len(self.old_dirs) == history_size:
                del self.old_dirs[0], self.old_stps[0], self.ro[0]
            self.old_dirs.append(y)
            self.old_stps.append(s)
            self.ro.append(1.0 / ys)
            self.h_diag = ys / _dot(y, y)
        return _two_loop(-flat_grad, self.old_dirs, self.old_stps, self.ro, self.h_diag)

    def to_host(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Tensor):
                value = np.array(value.numpy())
            elif f.name in _VECTOR_LISTS:
                value = [np.array(v.numpy()) for v in value]
            elif isinstance(value, list):
                value = list(value)
            out[f.name] = value
        return out

    @classmethod
    def from_host(cls, saved: dict[str, Any], device, dtype) -> "_History":
        def tensor(array) -> Tensor:
            return from_numpy(np.array(array, dtype=dtype.np), device)

        values = {}
        for f in fields(cls):
            value = saved[f.name]
            if f.name in _VECTOR_LISTS:
                value = [tensor(v) for v in value]
            elif f.name in ("d", "prev_flat_grad") and value is not None:
                value = tensor(value)
            values[f.name] = value
        return cls(**values)


def _max_abs(x: Tensor) -> float:
    return float(x.abs().max().item())


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
