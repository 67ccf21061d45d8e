"""What one training or validation step returns, and the plumbing around a step: moving a batch to a
device, bringing its results to the host for metrics, timing it.

Example:
    >>> def train_step(model, batch):
    ...     x, y = batch
    ...     logits = model(x)
    ...     return StepOutput(cross_entropy(logits, y), logits, y)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..tensor import Tensor
from .metrics import Observation


@dataclass
class StepOutput:
    """The result of a step.

    Args:
        loss: a scalar tensor; training calls `loss.backward()` on it.
        outputs: the model outputs, for metrics (a tensor or an array; optional).
        targets: the targets, for metrics (optional).
        items: the number of items in the batch; by default the first dim of outputs or targets.

    Example:
        >>> StepOutput(loss, logits, labels)
    """

    loss: Tensor
    outputs: Any = None
    targets: Any = None
    items: int | None = None


def move_to(batch: Any, device: Any) -> Any:
    """`batch` with every NumPy array and tensor in it on `device` (tuples, lists and dicts walked).

    Example:
        >>> x, y = move_to((np.ones((2, 3), np.float32), np.array([0, 1])), ember.Device.numpy())
        >>> x.device
        Device("numpy")
    """
    if isinstance(batch, Tensor):
        return batch.to(device)
    if isinstance(batch, np.ndarray):
        from ..api.creation import from_numpy
        return from_numpy(batch, device=device)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(move_to(b, device) for b in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(move_to(b, device) for b in batch)
    if isinstance(batch, Mapping):
        return {k: move_to(v, device) for k, v in batch.items()}
    return batch


def host(value: Any) -> np.ndarray | None:
    """A tensor or array-like as a NumPy array (None stays None).

    Example:
        >>> host(ember.tensor([1, 2]))
        array([1, 2])
    """
    if value is None:
        return None
    if isinstance(value, Tensor):
        return value.detach().numpy()
    return np.asarray(value)


class Clock:
    """Wall and CPU time between laps (CPU: this process, `time.process_time`).

    Example:
        >>> clock = Clock()
        >>> wall, cpu = clock.lap()
    """

    def __init__(self) -> None:
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def lap(self) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        out = (wall - self._wall, cpu - self._cpu)
        self._wall, self._cpu = wall, cpu
        return out


def checked(out: Any) -> StepOutput:
    """`out` when it is a `StepOutput` with a scalar tensor loss; else a clear error.

    Example:
        >>> checked(StepOutput(ember.tensor(0.5))).loss.numel
        1
    """
    if not isinstance(out, StepOutput):
        raise TypeError(f"a step must return StepOutput(loss, outputs, targets), got {type(out).__name__}")
    if not isinstance(out.loss, Tensor) or out.loss.numel != 1:
        shape = getattr(out.loss, "shape", None)
        raise ValueError(f"StepOutput.loss must be a scalar tensor, got {type(out.loss).__name__} of shape {shape}")
    return out


def detached(out: StepOutput) -> StepOutput:
    """`out` with its tensors cut from the gradient graph (no host read, no sync), so keeping it a
    while does not keep the graph's saved activations alive.

    Example:
        >>> detached(StepOutput(loss, logits, y)).outputs.requires_grad
        False
    """
    cut = [v.detach() if isinstance(v, Tensor) else v for v in (out.loss, out.outputs, out.targets)]
    return StepOutput(*cut, items=out.items)


def observe(out: StepOutput, wall: float, cpu: float, lr: float | None, device: Any) -> Observation:
    """The host `Observation` of a (`checked`) step output that took `wall` and `cpu` seconds: this
    reads the loss and the outputs, so on a lazy or asynchronous device it waits for them.

    Example:
        >>> obs = observe(StepOutput(loss, logits, y), *Clock().lap(), lr=1e-3, device=device)
    """
    outputs, targets = host(out.outputs), host(out.targets)
    items = out.items
    if items is None:
        first = outputs if outputs is not None and outputs.ndim else targets
        items = len(first) if first is not None and first.ndim else 1
    return Observation(float(out.loss.item()), outputs, targets, items, wall, cpu, lr, device)
