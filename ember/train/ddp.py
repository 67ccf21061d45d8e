"""`DataParallel`: data-parallel training over the ranks of an `ember.distributed` group (PyTorch's DDP).

At construction every parameter takes rank 0's value (a broadcast). `ddp.backward(loss)` runs the
backward walk with a hook on each trainable parameter: as a parameter's gradient is final it joins
its bucket (parameters in reverse order, ~`bucket_mb` MB per bucket, one dtype each), and a full
bucket is all-reduced at once, non-blocking, while the walk goes on; buckets start in a fixed order,
so every rank issues the same collectives. After the walk the rest are started, all are waited for,
and the returned `Gradients` hold the mean over ranks (a parameter no rank reached has none).

Inside `with ddp.no_sync():` backward stays local and its gradients are summed here; the next
`backward` outside adds the sum in before reducing, so accumulation costs one collective per step.

Example:
    >>> ddp = DataParallel(model)                       # after ember.distributed.init()
    >>> grads = ddp.backward(loss_fn(ddp(x), y))
    >>> optimizer.step(grads)
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from .. import distributed
from ..api.creation import zeros
from ..api.shape import cat
from ..autodiff.gradients import Gradients
from ..distributed import ProcessGroup, Work
from ..nn.module import Module
from ..nn.param import Param
from ..tensor import Tensor


class DataParallel:
    """`module` trained data-parallel over `group` (see the module docs). Attribute access other than
    the methods here goes to the module (`ddp.state_dict()`, `ddp.parameters()`)."""

    def __init__(self, module: Module, group: ProcessGroup | None = None, bucket_mb: float = 25.0,
                 broadcast: bool = True) -> None:
        if not isinstance(module, Module):
            raise TypeError(f"DataParallel wraps an ember.nn.Module, got {type(module).__name__}")
        if not bucket_mb > 0:
            raise ValueError(f"DataParallel bucket_mb must be > 0, got {bucket_mb!r}")
        self.module, self.group = module, group if group is not None else distributed.group()
        if broadcast:
            broadcast_parameters(module, self.group)
        self.params = [p for p in module.parameters() if not p.frozen and p.dtype.is_float]
        self.buckets = _plan(self.params, int(bucket_mb * 2**20))
        self._sync = True
        self._carried: dict[int, Tensor] = {}  # param index -> gradient summed under no_sync

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["module"], name)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes inside stay local; their gradients are added into the next synced one."""
        previous, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = previous

    def backward(self, loss: Tensor) -> Gradients:
        """`loss.backward()`, its gradients averaged over the ranks as they are produced (see the module
        docs); under `no_sync()` the local gradients (and they are carried to the next synced pass)."""
        if not self._sync:
            grads = loss.backward()
            for i, p in enumerate(self.params):
                g = p.grad(grads) if p.requires_grad else None
                if g is not None:
                    self._carried[i] = g if i not in self._carried else self._carried[i] + g
            return grads
        reducer = _Reducer(self)
        handles = [p.register_hook(reducer.hook(i)) for i, p in enumerate(self.params) if p.requires_grad]
        try:
            grads = loss.backward()
        finally:
            for handle in handles:
                handle.remove()
        reducer.finish(grads)
        self._carried.clear()
        return grads


def broadcast_parameters(module: Module, group: ProcessGroup, src: int = 0) -> None:
    """Give every parameter of `module` (frozen ones too) rank `src`'s value.

    Example:
        >>> broadcast_parameters(model, ember.distributed.group())
    """
    for p in module.parameters():
        p.set(group.broadcast(p.value, src))


def _plan(params: list[Param], cap: int) -> list[list[int]]:
    """Buckets of parameter indices: reverse order (gradients arrive roughly so), one dtype, <= cap bytes
    (a larger parameter gets a bucket of its own)."""
    buckets: list[list[int]] = []
    size, dtype = 0, None
    for i in reversed(range(len(params))):
        p = params[i]
        nbytes = p.numel * p.dtype.itemsize
        if not buckets or p.dtype is not dtype or size + nbytes > cap:
            buckets.append([])
            size, dtype = 0, p.dtype
        buckets[-1].append(i)
        size += nbytes
    return buckets


class _Reducer:
    """One synced backward pass: gradients into buckets, buckets all-reduced in order as they fill."""

    def __init__(self, ddp: DataParallel) -> None:
        self.ddp, self.group = ddp, ddp.group
        self.bucket_of = {i: b for b, bucket in enumerate(ddp.buckets) for i in bucket}
        self.grads: dict[int, Tensor] = {}
        self.missing = [len(bucket) for bucket in ddp.buckets]
        self.works: list[Work] = []  # of buckets 0, 1, ... (started in that order on every rank)

    def hook(self, index: int):
        def ready(g: Tensor) -> None:
            p = self.ddp.params[index]
            g = g if g.dtype is p.dtype else g.cast(p.dtype)
            carried = self.ddp._carried.get(index)
            self.grads[index] = g if carried is None else carried + g
            bucket = self.bucket_of[index]
            self.missing[bucket] -= 1
            while len(self.works) < len(self.ddp.buckets) and self.missing[len(self.works)] == 0:
                self._start(len(self.works))
            for work in self.works:  # lets MPI progress the collectives in flight
                work.is_completed()
        return ready

    def _start(self, b: int) -> None:
        """All-reduce bucket b: its gradients flat (zeros where this rank has none), then a reached flag
        per parameter, so the ranks learn which parameters any rank reached."""
        params, parts, flags = self.ddp.params, [], []
        for i in self.ddp.buckets[b]:
            g = self.grads.get(i, self.ddp._carried.get(i))
            reached = g is not None
            flags.append(1.0 if reached else 0.0)
            parts.append(g.reshape(-1) if reached else zeros(params[i].numel, dtype=params[i].dtype,
                                                                 device=params[i].device.inner))
        like = parts[0]
        parts.append(Tensor.new_tensor(like, flags))
        self.works.append(self.group.all_reduce(cat(parts), op="sum", async_op=True))

    def finish(self, grads: Gradients) -> None:
        while len(self.works) < len(self.ddp.buckets):
            self._start(len(self.works))
        size = self.group.size
        for b, work in enumerate(self.works):
            flat, bucket = work.wait(), self.ddp.buckets[b]
            offset, count = 0, len(bucket)
            flags = flat[flat.shape[0] - count:]
            locally = all(i in self.grads or i in self.ddp._carried for i in bucket)
            reached = [True] * count if locally else [bool(v) for v in flags.numpy().tolist()]
            for k, i in enumerate(bucket):
                p = self.ddp.params[i]
                n = p.numel
                if reached[k]:
                    grads.set(p, (flat[offset:offset + n] / size).reshape(p.shape))
                offset += n
