"""`EMA`: an exponential moving average of a model's weights, kept in a copy of the model for evaluation
(timm's `ModelEmaV3`, PyTorch's `AveragedModel` with an EMA rule).

Each `update(model)` after the first (which copies) sets every float parameter and buffer of the copy
to `averaged + (1 - d) * (current - averaged)`, d = `decay`; with `warmup=True`, d = min(decay,
1 - (1 + n)^-warmup_power) after n updates, so early averages forget the random initialisation fast.
`copy_to(model)` writes the averages into a model (to evaluate or save it as the trained one).

Example:
    >>> ema = EMA(model, decay=0.999, warmup=True)
    >>> for x, y in loader:
    ...     opt.step(loss_fn(model(x), y).backward())
    ...     ema.update(model)
    >>> ema(x_test)              # the averaged model
    >>> ema.copy_to(model)
"""

from __future__ import annotations

from ..nn.module import Module
from .lr.scheduler import check
from .swa import AveragedModel


class EMA(AveragedModel):
    """An exponential moving average of `model`'s weights (see the module docs).

    Args:
        model: the model being trained (copied into `.module`).
        decay: the weight of the average at each update, in [0, 1].
        warmup: ramp the decay up from 0 (timm's warmup: 1 - (1 + n)^-warmup_power, capped at `decay`).
        warmup_power: how fast the warmup ramps (2/3 for long runs; 3/4 for short ones, as in timm).
        use_buffers: average the float buffers too (batch norm statistics); else copy them.

    Example:
        >>> ema = EMA(model, decay=0.99)
        >>> ema.update(model); ema.decay_at(10)
        0.99
    """

    def __init__(self, model: Module, decay: float = 0.9999, warmup: bool = False, warmup_power: float = 2 / 3,
                 use_buffers: bool = True) -> None:
        check("EMA", "decay", decay, low=0.0, high=1.0)
        check("EMA", "warmup_power", warmup_power, low=0.0, low_open=True)
        self.decay, self.warmup, self.warmup_power = float(decay), bool(warmup), float(warmup_power)
        super().__init__(model, avg_fn=self._ema, use_buffers=use_buffers)

    def decay_at(self, n: int) -> float:
        """The decay of the update that follows `n` earlier updates."""
        if not self.warmup:
            return self.decay
        return min(self.decay, 1 - (1 + n) ** -self.warmup_power)

    def _ema(self, averaged, current, n: int):
        return averaged + (current - averaged) * (1 - self.decay_at(n))

    def update(self, model: Module) -> None:
        """Fold `model`'s current weights into the average (`update_parameters`)."""
        self.update_parameters(model)

    def copy_to(self, model: Module) -> Module:
        """Write the averaged parameters and buffers into `model` (same structure); returns `model`."""
        model.load_state_dict(self.module.state_dict())
        return model

    def extra_repr(self) -> str:
        return f"decay={self.decay}, warmup={self.warmup}, " + super().extra_repr()
