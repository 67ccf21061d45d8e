"""`Optimizer`: what every optimizer shares (Burn's design: an optimizer takes a module and `Gradients`).

An optimizer is built on a module. Its parameters are found by name; each belongs to the first
`ParamGroup` that matches it (else to the base options). `step(grads)`:

1. reads `p.grad(grads)` for every unfrozen parameter (without one, its state and step count stay),
2. clips the gradients when `clip_value=` / `clip_norm=` are set (value first, then the global norm
   over every gradient of this step, delegated groups included),
3. computes each new value with tensor ops on the inner (non-autodiff) device, `update(...)` of the
   subclass, and writes it with `p.set(new)`.

With `master_weights=True`, a bf16/f16 parameter is updated through an f32 master copy in its state.
A subclass states its hyperparameters' `defaults` (not `lr`) and implements `update` for one parameter.

A group may name a different optimizer class, `ParamGroup(prefix="emb.", optimizer=SGD, lr=0.1)`: its
parameters go to a *delegate* of that class built on the same module with the group's options (others
take that class's defaults); one `step` updates both and `state_dict` holds both. A group's own `lr`
keeps its ratio to the base lr when `opt.lr` changes (docs/training.md).

Example:
    >>> opt = AdamW(model, lr=1e-3, weight_decay=0.01, groups=[ParamGroup(prefix="head.", lr=1e-2)])
    >>> grads = loss.backward()
    >>> opt.step(grads)
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, ClassVar, Iterator, Sequence

import numpy as np

from ..api.creation import from_numpy
from ..autodiff.gradients import Gradients
from ..dtype import DType, bf16, f16, f32
from ..errors import ShapeError
from ..nn.module import Module
from ..nn.param import Param, ParamGroup
from ..tensor import Tensor
from .clip import clip_by_norm, clip_by_value


@dataclass
class _Entry:
    """One parameter this optimizer updates, with the options of its group."""

    name: str
    param: Param
    options: SimpleNamespace
    group_lr: float | None  # None: follows the base lr exactly


class Optimizer:
    """Base class of optimizers (see the module docs).

    Args:
        module: the model whose parameters are trained.
        lr: the base learning rate.
        groups: `ParamGroup`s with their own options (the first match wins); a group's `optimizer=`
            hands its parameters to another optimizer class.
        select: train only the parameters this group selects (the others are left alone).
        clip_value: clamp every gradient element to [-clip_value, clip_value] before the update.
        clip_norm: rescale the gradients so their global L2 norm is at most `clip_norm`.
        master_weights: update bf16/f16 parameters through f32 copies (see the module docs).
        **options: the hyperparameters in `defaults` of the subclass.

    Attributes:
        options: the base hyperparameters (groups override them for their parameters).
        state: per parameter name, the tensors the rule keeps between steps and its step count.
        steps: the number of `step` calls that updated at least one parameter.

    Example:
        >>> opt = SGD(model, lr=0.1, momentum=0.9, clip_norm=1.0,
        ...           groups=[ParamGroup(prefix="emb.", optimizer=Adam, lr=1e-3)])
        >>> opt.step(loss.backward())
    """

    defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, module: Module, lr: float, *, groups: Sequence[ParamGroup] = (),
                 select: ParamGroup | None = None, clip_value: float | None = None,
                 clip_norm: float | None = None, master_weights: bool = False, **options) -> None:
        name = type(self).__name__
        if not isinstance(module, Module):
            raise TypeError(f"{name} takes a Module, got {type(module).__name__}")
        _check_number(name, "lr", lr)
        for key, value in (("clip_value", clip_value), ("clip_norm", clip_norm)):
            if value is not None:
                _check_number(name, key, value, positive=True)
        for group in groups:
            if not isinstance(group, ParamGroup):
                raise TypeError(f"{name}: groups must be ParamGroups, got {type(group).__name__}")
        self._lr = self._initial_lr = float(lr)
        self.clip_value, self.clip_norm = clip_value, clip_norm
        self.master_weights = bool(master_weights)
        self.state: dict[str, dict[str, Any]] = {}
        self.steps = 0
        base = self.options = self._options(options, "")
        own = {i: self._group_options(g, options) for i, g in enumerate(groups) if not self._is_foreign(g)}
        self._entries: list[_Entry] = []
        claimed: dict[int, list[str]] = {i: [] for i in range(len(groups))}
        for pname, param in module.named_parameters():
            if select is not None and not select.matches(pname, param):
                continue
            index = next((i for i, g in enumerate(groups) if g.matches(pname, param)), None)
            if index is None:
                self._entries.append(_Entry(pname, param, base, None))
                continue
            claimed[index].append(pname)
            if index in own:
                self._entries.append(_Entry(pname, param, *own[index]))
        unused = [g for i, g in enumerate(groups) if not claimed[i]]
        if unused:  # most likely a misspelt prefix: say so rather than train with the base options
            names = [n for n, _ in module.named_parameters()]
            shown = ", ".join(names[:12]) + (f", ... ({len(names)} in all)" if len(names) > 12 else "")
            raise ValueError(f"{name}: group(s) {unused} get no parameter (none matches, or an earlier "
                             f"group takes them); the parameters are: {shown}")
        self._delegates: list[Optimizer] = [self._delegate(module, groups[i], names)
                                            for i, names in claimed.items() if i not in own]

    # ---- construction helpers --------------------------------------------------------------------
    def _options(self, given: dict, where: str) -> SimpleNamespace:
        unknown = sorted(set(given) - set(self.defaults))
        if unknown:
            raise ValueError(f"{type(self).__name__}{where}: unknown option(s) {unknown}; known: "
                             f"{sorted(['lr', *self.defaults])}")
        options = SimpleNamespace(**{**self.defaults, **given})
        self.check_options(options, where)
        return options

    def _is_foreign(self, group: ParamGroup) -> bool:
        return group.options.get("optimizer", type(self)) is not type(self)

    def _group_options(self, group: ParamGroup, base: dict) -> tuple[SimpleNamespace, float | None]:
        """The options of a group this optimizer runs itself, and its own lr (None: the base lr)."""
        given = {k: v for k, v in group.options.items() if k not in ("optimizer", "lr")}
        where = f" group {group!r}"
        if any(k in given for k in ("clip_value", "clip_norm")):
            raise ValueError(f"{type(self).__name__}{where}: clipping is set on the optimizer, not per group")
        group_lr = group.options.get("lr")
        if group_lr is not None:
            _check_number(type(self).__name__ + where, "lr", group_lr)
            if self._initial_lr == 0:
                raise ValueError(f"{type(self).__name__}{where}: a group with its own lr needs a nonzero "
                                 f"base lr (the group keeps its ratio to it under a scheduler)")
        return self._options({**base, **given}, where), group_lr

    def _delegate(self, module: Module, group: ParamGroup, names: list[str]) -> "Optimizer":
        cls = group.options["optimizer"]
        if not (isinstance(cls, type) and issubclass(cls, Optimizer)):
            raise TypeError(f"{type(self).__name__} group {group!r}: optimizer= must be an Optimizer "
                            f"class such as SGD, got {cls!r}")
        options = {k: v for k, v in group.options.items() if k not in ("optimizer", "lr")}
        lr = group.options.get("lr", self._initial_lr)
        if lr and not self._initial_lr:
            raise ValueError(f"{type(self).__name__} group {group!r}: a group with its own lr needs a "
                             f"nonzero base lr (the group keeps its ratio to it under a scheduler)")
        chosen = frozenset(names)
        try:
            return cls(module, lr=lr, select=ParamGroup(predicate=lambda n, p: n in chosen),
                       master_weights=self.master_weights, **options)
        except (ValueError, TypeError) as e:
            raise type(e)(f"{type(self).__name__} group {group!r}: {e}") from None

    # ---- the subclass interface ------------------------------------------------------------------
    def check_options(self, options: SimpleNamespace, where: str) -> None:
        """Raise `ValueError` for a bad hyperparameter (subclasses extend this)."""
        for key in ("weight_decay", "eps", "momentum"):
            if hasattr(options, key):
                _check_number(type(self).__name__ + where, key, getattr(options, key))

    def update(self, value: Tensor, grad: Tensor, state: dict, options: SimpleNamespace, lr: float) -> Tensor:
        """The new value of one parameter. `state` holds this parameter's tensors between steps
        (`state["step"]` is already this step's number, from 1) and is updated in place."""
        raise NotImplementedError(f"{type(self).__name__} does not define update()")

    # ---- learning rate ---------------------------------------------------------------------------
    @property
    def lr(self) -> float:
        """The base learning rate (what schedulers set); groups follow it (see the module docs)."""
        return self._lr

    @lr.setter
    def lr(self, value: float) -> None:
        _check_number(type(self).__name__, "lr", value)
        self._lr = float(value)
        for delegate in self._delegates:
            delegate.lr = delegate._initial_lr * self._scale()

    @property
    def initial_lr(self) -> float:
        """The base lr the optimizer was built with: schedulers scale from it, as PyTorch's from `initial_lr`."""
        return self._initial_lr

    def _scale(self) -> float:
        return self._lr / self._initial_lr if self._initial_lr else 1.0

    def _lr_of(self, entry: _Entry) -> float:
        return self._lr if entry.group_lr is None else entry.group_lr * self._scale()

    # ---- stepping --------------------------------------------------------------------------------
    def step(self, grads: Gradients) -> None:
        """Update every unfrozen parameter that has a gradient in `grads` (see the module docs).

        Example:
            >>> opt.step(loss.backward())
        """
        if not isinstance(grads, Gradients):
            raise TypeError(f"{type(self).__name__}.step takes the Gradients of backward(), "
                            f"got {type(grads).__name__}")
        found = list(self._with_grads(grads))
        if not found and any(not e.param.frozen for e in self._all_entries()):
            # Every step makes fresh leaves, so gradients from before the last step match nothing.
            raise ValueError(f"{type(self).__name__}.step: no trainable parameter has a gradient in these "
                             f"Gradients; compute them from this model's current values (after the last step)")
        clipped = [g for _, _, g in found]
        if self.clip_value is not None:
            clipped = clip_by_value(clipped, self.clip_value)
        if self.clip_norm is not None:
            clipped, _ = clip_by_norm(clipped, self.clip_norm)
        for (owner, entry, _), grad in zip(found, clipped):
            owner._apply(entry, grad)
        for owner in {id(o): o for o, _, _ in found}.values():
            owner.steps += 1

    def _with_grads(self, grads: Gradients) -> Iterator[tuple["Optimizer", _Entry, Tensor]]:
        """(owner, entry, gradient) of every trainable parameter with a gradient, delegates included."""
        for entry in self._entries:
            grad = _grad_of(entry, grads, type(self).__name__)
            if grad is not None:
                yield self, entry, grad
        for delegate in self._delegates:
            yield from delegate._with_grads(grads)

    def _all_entries(self) -> Iterator[_Entry]:
        yield from self._entries
        for delegate in self._delegates:
            yield from delegate._all_entries()

    def _apply(self, entry: _Entry, grad: Tensor) -> None:
        state = self.state.setdefault(entry.name, {"step": 0})
        state["step"] += 1
        param = entry.param
        value = state.get("master")
        if value is None:
            value = param.value.inner().cast(self._state_dtype(param))
        new = self.update(value, grad.cast(value.dtype), state, entry.options, self._lr_of(entry))
        if new.dtype is not param.dtype:  # the f32 master of a low-precision parameter
            state["master"] = new
        param.set(new.cast(param.dtype))

    def _state_dtype(self, param: Param) -> DType:
        """The dtype the rule computes in for `param`: f32 for a master-weighted f16/bf16 one, else its own."""
        return f32 if self.master_weights and param.dtype in (f16, bf16) else param.dtype

    # ---- state -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state keyed by parameter name: tensors as host NumPy arrays, the rest scalars.

        Example:
            >>> d = opt.state_dict()
            >>> d["params"]["head.weight"]["step"]
            10
        """
        entries = {e.name: (e.param.shape, e.options) for e in self._entries}
        return {
            "optimizer": type(self).__name__,
            "lr": self._lr,
            "steps": self.steps,
            "params": {name: {k: (np.array(v.numpy()) if isinstance(v, Tensor) else v)
                              for k, v in self.saved_state(s, *entries[name]).items()}
                       for name, s in self.state.items()},
            "delegates": [d.state_dict() for d in self._delegates],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict` (possibly saved from another copy of the same model); the values move
        to each parameter's device and dtype.

        Example:
            >>> opt.load_state_dict(saved)
        """
        name = type(self).__name__
        if state.get("optimizer") != name:
            raise ValueError(f"{name}.load_state_dict: the state is of optimizer {state.get('optimizer')!r}")
        delegates = state.get("delegates", [])
        if len(delegates) != len(self._delegates):
            raise ValueError(f"{name}.load_state_dict: the state has {len(delegates)} delegated group(s), "
                             f"this optimizer {len(self._delegates)}")
        params = {e.name: e.param for e in self._entries}
        unknown = sorted(set(state["params"]) - set(params))
        if unknown:
            raise KeyError(f"{name}.load_state_dict: state for unknown parameter(s) {unknown}")
        options = {e.name: e.options for e in self._entries}
        restored = {}
        for pname, s in state["params"].items():
            saved = {k: self._restore(pname, k, v, params[pname]) for k, v in s.items()}
            value = saved.get("master")
            if value is None:
                value = params[pname].value.inner().cast(self._state_dtype(params[pname]))
            restored[pname] = self.restored_state(saved, value, options[pname])
        for delegate, saved in zip(self._delegates, delegates):
            delegate.load_state_dict(saved)
        self.state, self.steps, self.lr = restored, int(state["steps"]), state["lr"]
        # The restored state is computed now (Adam's packing is a `cat`), not left pending: pending ops
        # join the fusion blocks of the next step and move where its blocks are cut, and with them the
        # last bits of its gradients, so a resumed run would not replay the run that went on (whose
        # checkpoint read everything, leaving nothing pending).
        for device in {p.device.inner for p in params.values()}:
            device.sync()

    def saved_state(self, state: dict, shape: tuple, options: SimpleNamespace) -> dict:
        """One parameter's state as `state_dict` saves it (tensors and scalars by name; `shape` is the
        parameter's, `options` its group's): by default the state itself; a rule that keeps its tensors in
        another form names them here (Adam's packed moments).

        Example:
            >>> opt.saved_state(opt.state["head.weight"], (10, 64), opt.options).keys()
            dict_keys(['step', 'exp_avg', 'exp_avg_sq'])
        """
        return state

    def restored_state(self, saved: dict, value: Tensor, options: SimpleNamespace) -> dict:
        """The inverse of `saved_state`: one parameter's state from what `state_dict` saved (its tensors
        already on the parameter's device and dtype; `value` the parameter's value on the inner device,
        `options` its group's). By default what was saved.

        Example:
            >>> opt.restored_state({"step": 0}, value, opt.options)
            {'step': 0}
        """
        return saved

    def _restore(self, pname: str, key: str, value, param: Param):
        dtype = self._state_dtype(param)
        if isinstance(value, list):  # a tensor that went through JSON
            value = np.asarray(value, dtype=dtype.np)
        if not isinstance(value, np.ndarray):
            return value
        if value.shape != param.shape:
            raise ShapeError(f"{type(self).__name__}.load_state_dict",
                             f"{pname}.{key} has shape {value.shape}, the parameter {param.shape}")
        return from_numpy(np.array(value), param.device.inner).cast(dtype)

    def __repr__(self) -> str:
        delegated = "".join(f", {type(d).__name__}: {len(d._entries)} params" for d in self._delegates)
        return f"{type(self).__name__}(lr={self._lr}, params={len(self._entries)}{delegated})"


def check_betas(who: str, betas, count: int) -> None:
    """Raise unless `betas` is a tuple of `count` numbers in [0, 1) (the decay rates of moving averages).

    Example:
        >>> check_betas("Adam", (0.9, 0.999), 2)
    """
    if not isinstance(betas, (tuple, list)) or len(betas) != count or \
            not all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1 for b in betas):
        raise ValueError(f"{who}: betas must be {count} numbers in [0, 1), got {betas!r}")


def _grad_of(entry: _Entry, grads: Gradients, who: str) -> Tensor | None:
    param = entry.param
    if param.frozen:
        return None
    if not param.requires_grad:
        raise ValueError(f"{who}: parameter {entry.name!r} is not tracked by autodiff; move the module to an "
                         f"autodiff device first (model.to(device.autodiff()))")
    return param.grad(grads)


def _check_number(who: str, key: str, value, positive: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{who}: {key} must be a number, got {value!r}")
    if not (value > 0 if positive else value >= 0):
        raise ValueError(f"{who}: {key} must be {'> 0' if positive else '>= 0'}, got {value}")
