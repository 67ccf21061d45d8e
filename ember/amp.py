"""Mixed precision: `autocast` (per-op dtype policy at the tensor-API boundary) and `GradScaler`.

Inside `with ember.autocast(device, dtype=ember.bf16):` the ops PyTorch runs in lower precision
(matmul, linear, convolutions, attention, ...) cast their floating inputs (f32/f16/bf16; f64 is left
alone, as in PyTorch) to `dtype`, and the ops PyTorch keeps in f32 (reductions, norms, softmax,
log_softmax, losses, exp/log/pow, ...) cast f16/bf16 inputs to f32. The casts are ordinary `cast` ops,
so gradients flow back through them to each input's own dtype: f32 master weights get f32 gradients.
An op's own internals run with autocast switched off (as PyTorch's dispatcher does), so a composed op
casts once, at its boundary. Only tensors on the autocast's device kind are cast. The op lists are
`OPS` (filled by the decorators below) and docs/training.md, "Mixed precision".

`GradScaler` is dynamic loss scaling for f16: scale the loss, step only when the unscaled gradients
are finite, back the scale off on inf/NaN and grow it after `growth_interval` clean steps.

Example:
    >>> with ember.autocast("cpu", dtype="bf16"):
    ...     y = model(x)                     # matmuls in bf16, softmax and losses in f32
    ...     loss = F.cross_entropy(y, t)     # f32
    >>> grads = loss.backward()              # f32 gradients for f32 parameters
"""

from __future__ import annotations

import contextvars
import functools
import operator
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from .autodiff.gradients import Gradients
from .device import Device
from .dtype import DType, bf16, dtype_of, f16, f32
from .tensor import Tensor

__all__ = ["autocast", "is_autocast_enabled", "lower_precision", "float32", "OPS", "GradScaler"]

F = TypeVar("F", bound=Callable[..., Any])

LOW = (f16, bf16)
"""The lower-precision float dtypes autocast runs in."""

OPS: dict[str, list[str]] = {"lower_precision": [], "float32": []}
"""The ops under each autocast policy, by the name users call them (filled as ember's modules load)."""


@dataclass(frozen=True)
class _Policy:
    kind: str  # the device kind whose tensors are cast ("cpu", "cuda", "wgpu", "numpy")
    dtype: DType


_active: contextvars.ContextVar[_Policy | None] = contextvars.ContextVar("ember_autocast", default=None)


class autocast:  # noqa: N801  (PyTorch's name; a context manager, used as `with ember.autocast(...)`)
    """Run the ops of the lower-precision list in `dtype` on tensors of `device`'s kind (see the module
    docs). Nestable; `enabled=False` switches autocast off inside an outer one.

    Args:
        device: the device (or its kind, `"cpu"`, `"cuda"`, `"wgpu"`, `"numpy"`) whose tensors are cast;
            its autodiff variant and every index of the kind alike.
        dtype: `ember.bf16` (the default) or `ember.f16`, or their names ("bf16", "bfloat16", ...).
        enabled: False runs the block without autocast.

    Example:
        >>> with ember.autocast(ember.Device.cpu(), dtype=ember.bf16):
        ...     (ember.ones(2, 3) @ ember.ones(3, 4)).dtype
        DType('bf16')
    """

    def __init__(self, device, dtype: DType | str = bf16, enabled: bool = True) -> None:
        self.dtype = dtype_of(dtype)
        if self.dtype not in LOW:
            raise ValueError(f"autocast: dtype must be bf16 or f16, got {self.dtype}")
        self.device = Device(device)
        self.enabled = bool(enabled)
        self._tokens: list[contextvars.Token] = []

    def __enter__(self) -> "autocast":
        policy = _Policy(self.device.kind, self.dtype) if self.enabled else None
        self._tokens.append(_active.set(policy))
        return self

    def __exit__(self, *exc) -> None:
        _active.reset(self._tokens.pop())

    def __call__(self, fn: F) -> F:
        """`@ember.autocast(device)` on a function runs each of its calls under this autocast."""
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with autocast(self.device, self.dtype, self.enabled):
                return fn(*args, **kwargs)
        return run  # type: ignore[return-value]


def is_autocast_enabled() -> bool:
    """Whether an op called here would be autocast (inside an enabled `autocast`, outside an op body).

    Example:
        >>> with ember.autocast("cpu"):
        ...     ember.amp.is_autocast_enabled()
        True
    """
    return _active.get() is not None


def _policy_op(policy: str, name: str | None, target: Callable[[_Policy], DType | None]):
    def decorate(fn: F) -> F:
        OPS[policy].append(name or fn.__name__)

        @functools.wraps(fn)
        def op(*args, **kwargs):
            active = _active.get()
            if active is None:
                return fn(*args, **kwargs)
            to = target(active)
            args = tuple(_cast(a, active.kind, to) for a in args)
            kwargs = {k: _cast(v, active.kind, to) for k, v in kwargs.items()}
            token = _active.set(None)  # the op's internals run as written
            try:
                return fn(*args, **kwargs)
            finally:
                _active.reset(token)
        return op  # type: ignore[return-value]
    return decorate


def _cast(value, kind: str, to: DType | None):
    if not isinstance(value, Tensor) or value._device.kind != kind:
        return value
    dtype = value.dtype
    return value.cast(to) if dtype is not to and dtype in (f32, *LOW) else value


def lower_precision(fn: F | None = None, *, name: str | None = None):
    """Mark an op of autocast's lower-precision list: under autocast its f32/f16/bf16 tensor arguments are
    cast to the autocast dtype and its body runs with autocast off.

    Example:
        >>> @lower_precision
        ... def matmul(a, b): ...
    """
    decorate = _policy_op("lower_precision", name, lambda p: p.dtype)
    return decorate(fn) if fn is not None else decorate


def float32(fn: F | None = None, *, name: str | None = None):
    """Mark an op of autocast's f32 list: under autocast its f16/bf16 tensor arguments are cast to f32 and
    its body runs with autocast off.

    Example:
        >>> @float32
        ... def softmax(x, dim=-1): ...
    """
    decorate = _policy_op("float32", name, lambda p: f32)
    return decorate(fn) if fn is not None else decorate


class GradScaler:
    """Dynamic loss scaling (PyTorch's `torch.amp.GradScaler`, fitted to `backward()` returning
    `Gradients`): f16 gradients of small losses underflow to zero; scaling the loss by `scale` keeps
    them representable, and the step divides it out again.

    `step(optimizer, grads)` unscales `grads` (unless they came from `unscale`), and steps the optimizer
    only when every gradient is finite; `update()` then multiplies the scale by `backoff_factor` after a
    skipped step, or by `growth_factor` after `growth_interval` consecutive finite ones.

    Args:
        init_scale: the first scale.
        growth_factor: the factor (> 1) the scale grows by after `growth_interval` finite steps.
        backoff_factor: the factor (in (0, 1)) the scale shrinks by after a step with inf/NaN gradients.
        growth_interval: how many consecutive finite steps grow the scale.
        enabled: False makes every method a pass-through (scale 1, every step taken).

    Example:
        >>> scaler = GradScaler()
        >>> with ember.autocast(device, dtype=ember.f16):
        ...     loss = F.cross_entropy(model(x), y)
        >>> grads = scaler.scale(loss).backward()
        >>> scaler.step(opt, grads)        # skipped when a gradient is inf/NaN
        >>> scaler.update()
    """

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        if not init_scale > 0:
            raise ValueError(f"GradScaler: init_scale must be > 0, got {init_scale}")
        if not growth_factor > 1:
            raise ValueError(f"GradScaler: growth_factor must be > 1, got {growth_factor}")
        if not 0 < backoff_factor < 1:
            raise ValueError(f"GradScaler: backoff_factor must be in (0, 1), got {backoff_factor}")
        if isinstance(growth_interval, bool) or not isinstance(growth_interval, int) or growth_interval < 1:
            raise ValueError(f"GradScaler: growth_interval must be a positive int, got {growth_interval!r}")
        self._scale, self._enabled = float(init_scale), bool(enabled)
        self._growth_factor, self._backoff_factor = float(growth_factor), float(backoff_factor)
        self._growth_interval, self._growth_tracker = growth_interval, 0
        self._unscaled: Gradients | None = None  # the last `unscale` result, so `step` does not redo it
        self._found_inf: bool | None = None  # this step's verdict, until `update`

    def is_enabled(self) -> bool:
        """Whether the scaler scales (False: every method passes its input through)."""
        return self._enabled

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled)."""
        return self._scale if self._enabled else 1.0

    def scale(self, loss):
        """`loss * scale`: backward of it gives the scaled gradients.

        Example:
            >>> grads = scaler.scale(loss).backward()
        """
        return loss * self._scale if self._enabled else loss

    def unscale(self, grads: Gradients) -> Gradients:
        """`grads` divided by the scale (new `Gradients`; clip these), and whether any is inf/NaN recorded
        for `step`. Call it at most once per step.

        Example:
            >>> grads = scaler.unscale(scaler.scale(loss).backward())
            >>> grads, _ = clip_grads(grads, 1.0)   # on the true gradients
        """
        if not isinstance(grads, Gradients):
            raise TypeError(f"GradScaler.unscale takes the Gradients of backward(), got {type(grads).__name__}")
        if not self._enabled:
            return grads
        if self._unscaled is not None:
            raise RuntimeError("GradScaler.unscale was already called since the last update()")
        inv = 1.0 / self._scale
        # Gradients are keyed by autodiff node; a new map with the same keys keeps them findable.
        by_node = {node: g * inv for node, g in grads._by_node.items()}
        self._found_inf = not _all_finite(list(by_node.values()))
        self._unscaled = Gradients(by_node)
        return self._unscaled

    def step(self, optimizer, grads: Gradients) -> bool:
        """Unscale `grads` (unless they are what `unscale` returned) and run `optimizer.step` on them
        when all are finite. Returns whether the optimizer stepped (PyTorch returns None when skipped).

        Example:
            >>> took = scaler.step(opt, scaler.scale(loss).backward())
        """
        if not self._enabled:
            optimizer.step(grads)
            return True
        if grads is not self._unscaled:
            grads = self.unscale(grads)
        if self._found_inf:
            return False
        optimizer.step(grads)
        return True

    def update(self, new_scale: float | None = None) -> None:
        """Adjust the scale after a step (or set it to `new_scale`), as PyTorch's `update`.

        Example:
            >>> scaler.update()
        """
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale)
        elif self._found_inf is None:
            raise RuntimeError("GradScaler.update: no step or unscale since the last update()")
        elif self._found_inf:
            self._scale *= self._backoff_factor
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self._growth_interval:
                self._scale *= self._growth_factor
                self._growth_tracker = 0
        self._unscaled = self._found_inf = None

    def state_dict(self) -> dict[str, Any]:
        """The scale and its schedule, under PyTorch's keys (empty when disabled).

        Example:
            >>> scaler.state_dict()["scale"]
            65536.0
        """
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor, "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval, "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict` (PyTorch's GradScaler's loads too).

        Example:
            >>> scaler.load_state_dict(saved)
        """
        if not self._enabled:
            return
        if not state:
            raise ValueError("GradScaler.load_state_dict: the state is empty (saved from a disabled scaler)")
        self._scale = float(state["scale"])
        self._growth_factor, self._backoff_factor = float(state["growth_factor"]), float(state["backoff_factor"])
        self._growth_interval, self._growth_tracker = int(state["growth_interval"]), int(state["_growth_tracker"])


def _all_finite(tensors: list) -> bool:
    """Whether every element of every tensor is finite (one host read for all of them)."""
    if not tensors:
        return True
    finite = functools.reduce(operator.and_, [t.isfinite().all() for t in tensors])
    return bool(finite.item())
