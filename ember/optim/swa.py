"""Averages of a model's weights over training: `AveragedModel` (SWA by default, or any rule such as an
exponential moving average), the `SWALR` schedule and `update_bn`, as `torch.optim.swa_utils`.

`AveragedModel(model)` keeps a copy of `model` (`.module`) and a count `n_averaged`. Each
`update_parameters(model)` makes the copy's parameters `avg_fn(averaged, current, n_averaged)` (the first
call copies them); its buffers are copied from `model` as they are, or averaged too with
`use_buffers=True` (float buffers only: integer ones such as `num_batches_tracked` are copied). Tensors
never change, so an average is a new value written into the copy's parameters (`Param.set`), computed
on the inner device. The state dict holds `n_averaged` and `module.<name>`, PyTorch's names.

Example:
    >>> swa = AveragedModel(model)
    >>> sched = SWALR(opt, swa_lr=0.05, anneal_epochs=5)
    >>> for epoch in range(epochs):
    ...     train_one_epoch(model, opt)
    ...     if epoch >= swa_start:
    ...         swa.update_parameters(model)
    ...         sched.step()
    >>> update_bn(loader, swa.module)
"""

from __future__ import annotations

import math
from typing import Callable, Iterable

from ..api.creation import tensor as make_tensor
from ..errors import ShapeError
from ..nn.module import Module, _set_attribute
from ..nn.norm import _BatchNorm
from ..tensor import Tensor
from .lr.scheduler import Scheduler, check

AvgFn = Callable[[Tensor, Tensor, int], Tensor]


def get_swa_avg_fn() -> AvgFn:
    """The running mean: `averaged + (current - averaged) / (n_averaged + 1)` (AveragedModel's default)."""
    def swa_update(averaged: Tensor, current: Tensor, n_averaged: int) -> Tensor:
        return averaged + (current - averaged) / (n_averaged + 1)
    return swa_update


def get_ema_avg_fn(decay: float = 0.999) -> AvgFn:
    """The exponential moving average `averaged + (1 - decay) * (current - averaged)` (torch's lerp).

    Example:
        >>> ema = AveragedModel(model, avg_fn=get_ema_avg_fn(0.99))
    """
    check("get_ema_avg_fn", "decay", decay, low=0.0, high=1.0)

    def ema_update(averaged: Tensor, current: Tensor, n_averaged: int) -> Tensor:
        return averaged + (current - averaged) * (1 - decay)
    return ema_update


class AveragedModel(Module):
    """A copy of `model` whose weights are an average of the weights `model` had (see the module docs).

    Args:
        model: the model being trained; it is copied (`model.copy()`), and later updates must pass a
            model of the same structure.
        avg_fn: `avg_fn(averaged, current, n_averaged) -> new averaged` (default: `get_swa_avg_fn()`).
        use_buffers: average the float buffers too (e.g. batch norm statistics) instead of copying them.
    Calling it runs the averaged copy.

    Example:
        >>> swa = AveragedModel(model)
        >>> swa.update_parameters(model); swa(x)
    """

    def __init__(self, model: Module, avg_fn: AvgFn | None = None, use_buffers: bool = False) -> None:
        if not isinstance(model, Module):
            raise TypeError(f"{type(self).__name__} averages a Module, got {type(model).__name__}")
        self.module = model.copy()
        self.n_averaged = make_tensor(0, dtype="i64", device=_device_of(model))
        self._avg_fn = avg_fn or get_swa_avg_fn()
        self._use_buffers = use_buffers

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _average(self, averaged: Tensor, current: Tensor, n: int) -> Tensor:
        """The new averaged value of one tensor (on the averaged one's inner device)."""
        current = current.detach().to(averaged.device).inner()
        if n == 0 or not averaged.dtype.is_float:
            return current
        return self._avg_fn(averaged.detach().inner(), current.cast(averaged.dtype), n)

    def update_parameters(self, model: Module) -> None:
        """Average `model`'s current weights into the copy (the first call copies them)."""
        n = int(self.n_averaged.item())
        mine, theirs = dict(self.module.named_parameters()), dict(model.named_parameters())
        if list(mine) != list(theirs) or any(p.shape != theirs[k].shape for k, p in mine.items()):
            raise ShapeError(f"{type(self).__name__}.update_parameters",
                             f"the model's parameters {[(k, p.shape) for k, p in theirs.items()]} are not the "
                             f"averaged copy's {[(k, p.shape) for k, p in mine.items()]}")
        for name, p in mine.items():
            p.set(self._average(p.value, theirs[name].value, n))
        buffers = dict(model.named_buffers())
        for name, b in list(self.module.named_buffers()):
            new = self._average(b, buffers[name], n) if self._use_buffers else buffers[name].detach()
            _set_attribute(self.module, name, new.to(b.device))
        self.n_averaged = self.n_averaged + 1

    def extra_repr(self) -> str:
        return f"n_averaged={int(self.n_averaged.item())}"


def _device_of(model: Module):
    """The device of the model's first parameter or buffer (the default device if it has neither)."""
    for _, t in [*model.named_parameters(), *model.named_buffers()]:
        return t.device.inner
    return None


_ANNEAL = {"cos": lambda t: (1 - math.cos(math.pi * t)) / 2, "linear": lambda t: t}


class SWALR(Scheduler):
    """Anneal the lr from its value when this schedule starts to `swa_lr` over `anneal_epochs` steps,
    then hold it (PyTorch's `SWALR`): lr = swa_lr * a + start_lr * (1 - a), a = anneal(min(1, t /
    anneal_epochs)), anneal "cos" ((1 - cos(pi * x)) / 2) or "linear" (x); with anneal_epochs=0 the first
    step is already at swa_lr.

    Example:
        >>> sched = SWALR(opt, swa_lr=0.05, anneal_epochs=5, anneal_strategy="linear")
        >>> sched.step()
    """

    def __init__(self, optimizer, swa_lr: float, anneal_epochs: int = 10, anneal_strategy: str = "cos") -> None:
        check("SWALR", "swa_lr", swa_lr, low=0.0)
        check("SWALR", "anneal_epochs", anneal_epochs, kind=int, low=0)
        if anneal_strategy not in _ANNEAL:
            raise ValueError(f"SWALR: anneal_strategy must be one of {sorted(_ANNEAL)}, got {anneal_strategy!r}")
        self.swa_lr, self.anneal_epochs = float(swa_lr), anneal_epochs
        self._anneal = _ANNEAL[anneal_strategy]
        self.start_lr = float(getattr(optimizer, "lr", 0.0))
        super().__init__(optimizer)

    def lr_at(self, t: int) -> float:
        if self.anneal_epochs == 0:
            t = max(1, t)
        a = self._anneal(max(0.0, min(1.0, t / max(1, self.anneal_epochs))))
        return self.swa_lr * a + self.start_lr * (1 - a)


def update_bn(loader: Iterable, model: Module, device=None) -> None:
    """Recompute the running statistics of every batch norm in `model` with one pass over `loader`
    (PyTorch's `update_bn`): they are reset, then averaged over the batches with equal weight (momentum
    None for the pass), in training mode; the modes and momenta are restored after. A batch that is a
    list or tuple passes its first item; `device` moves each input there first.

    Example:
        >>> update_bn(train_loader, swa.module)
    """
    norms = [m for _, m in model.named_modules() if isinstance(m, _BatchNorm) and m.track_running_stats]
    if not norms:
        return
    momenta = [m.momentum for m in norms]
    modes = [m.training for _, m in model.named_modules()]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    try:
        for batch in loader:
            x = batch[0] if isinstance(batch, (list, tuple)) else batch
            model(x.to(device) if device is not None else x)
    finally:
        for m, momentum in zip(norms, momenta):
            m.momentum = momentum
        for (_, m), mode in zip(model.named_modules(), modes):
            m.training = mode
