"""`MultiDevice`: several devices driven from threads of one process, gradients combined on the main
device (Burn's multi-device strategy), for machines without a launcher.

The model lives on `devices[0]` (the main device); each other device holds a copy, refreshed from the
main model before each step. `step(fn, batch)` splits the batch along dim 0 into one chunk per device
(sizes differ by at most one), runs `fn(model, chunk) -> StepOutput` and its backward on each device in
its own thread, and returns the main device's `Gradients` and `StepOutput`: the gradients are
sum_i (n_i / n) * grad_i, which is the gradient of the mean loss over the whole batch (losses that
average over their items, as ember's do by default), and the loss is weighted alike.

Example:
    >>> md = MultiDevice(model, [Device.cpu(), Device.cpu()])
    >>> grads, out = md.step(lambda m, b: StepOutput(mse_loss(m(b[0]), b[1])), (x, y))
    >>> optimizer.step(grads)
"""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

import numpy as np

from ..api.shape import cat
from ..autodiff.gradients import Gradients
from ..device import Device
from ..nn.module import Module
from ..tensor import Tensor
from .step import StepOutput, checked, move_to


class MultiDevice:
    """`model` trained on `devices` from threads of this process (see the module docs)."""

    def __init__(self, model: Module, devices: Sequence[Any]) -> None:
        self.devices = [Device(d).inner for d in devices]
        if not self.devices:
            raise ValueError("MultiDevice needs at least one device")
        self.model = model.to(self.devices[0].autodiff())
        self.replicas = [self.model] + [copy.deepcopy(model).to(d.autodiff()) for d in self.devices[1:]]
        self._pool = ThreadPoolExecutor(len(self.devices), thread_name_prefix="ember-device")

    def step(self, fn: Callable[[Module, Any], StepOutput], batch: Any,
             loss_scale: float = 1.0) -> tuple[Gradients, StepOutput]:
        """Forward and backward of `batch` split over the devices; (main-device gradients, output). The
        gradients are of the loss times `loss_scale` (1 / window under accumulation); the output's is not."""
        self._refresh()
        chunks = _split(batch, len(self.devices))
        sizes = [_items(c) for c in chunks]
        total = sum(sizes)
        if not total:
            raise ValueError("MultiDevice.step: the batch is empty")
        jobs = [self._pool.submit(self._run, fn, r, d, c, loss_scale) for r, d, c in zip(self.replicas, self.devices, chunks)
                if _items(c)]
        results = [job.result() for job in jobs]
        weights = [n / total for n in sizes if n]
        main, found = self.devices[0], [dict(grads) for _, grads in results]
        pairs = []
        for name, p in self.model.named_parameters():
            parts = [w * g[name].to(main) for w, g in zip(weights, found) if name in g]
            if parts:
                pairs.append((p, _sum(parts)))
        outs = [out for out, _ in results]
        loss = _sum([w * o.loss.to(main) for w, o in zip(weights, outs)])
        return Gradients.from_pairs(pairs), StepOutput(loss, _joined([o.outputs for o in outs], main),
                                                       _joined([o.targets for o in outs], main), total)

    def _run(self, fn, replica: Module, device: Device, chunk: Any, scale: float) -> tuple[StepOutput, list]:
        out = checked(fn(replica, move_to(chunk, device.autodiff())))
        grads = (out.loss * scale if scale != 1 else out.loss).backward()
        found = [(n, p.grad(grads)) for n, p in replica.named_parameters() if p.requires_grad]
        detached = StepOutput(out.loss.detach(), _detach(out.outputs), _detach(out.targets), out.items)
        return detached, [(n, g) for n, g in found if g is not None]

    def _refresh(self) -> None:
        values = dict(self.model.named_parameters())
        for replica in self.replicas[1:]:
            for name, p in replica.named_parameters():
                p.set(values[name].value)

    def close(self) -> None:
        self._pool.shutdown()


def _sum(values: list[Tensor]) -> Tensor:
    total = values[0]
    for v in values[1:]:
        total = total + v
    return total


def _split(batch: Any, parts: int) -> list:
    """`batch` (arrays and tensors in tuples, lists, dicts) cut along dim 0 into `parts` near-equal chunks."""
    n = _items(batch)
    bounds = [round(k * n / parts) for k in range(parts + 1)]
    return [_take(batch, a, b) for a, b in zip(bounds, bounds[1:])]


def _take(batch: Any, a: int, b: int) -> Any:
    if isinstance(batch, (Tensor, np.ndarray)):
        return batch[a:b]
    if isinstance(batch, (tuple, list)):
        return type(batch)(_take(x, a, b) for x in batch)
    if isinstance(batch, dict):
        return {k: _take(v, a, b) for k, v in batch.items()}
    return batch


def _items(batch: Any) -> int:
    if isinstance(batch, (Tensor, np.ndarray)):
        return int(batch.shape[0])
    if isinstance(batch, (tuple, list)) and batch:
        return _items(batch[0])
    if isinstance(batch, dict) and batch:
        return _items(next(iter(batch.values())))
    raise ValueError(f"MultiDevice: cannot split a batch of {type(batch).__name__} along dim 0; give arrays or "
                     f"tensors (in tuples, lists or dicts)")


def _detach(value: Any) -> Any:
    return value.detach() if isinstance(value, Tensor) else value


def _joined(values: list, device: Device) -> Any:
    if any(v is None for v in values):
        return None
    if all(isinstance(v, Tensor) for v in values):
        return cat([v.to(device) for v in values])
    return np.concatenate([np.asarray(v) for v in values])
