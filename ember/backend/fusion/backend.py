"""The fusion decorator: `Fusion(inner)` records ops lazily and runs them as fused kernels at sync points.

`execute` does not run elementwise ops and reductions: it records them into the device's stream and
returns a pending `LazyHandle`. Any other op first needs its inputs' data, so it is a sync point; it
then runs at once through the inner backend (its output can start the next fused chain, which is how a
matmul's epilogue fuses). The other sync points are `to_host`, `sync` and `[fusion] max_ops` recorded
ops. At a sync point the block is looked up in the plan cache by its normalized key; a miss builds the
plan (`fusers.select`), a hit replays it. Values whose handles nobody holds any more are never written.

Thread safety: one stream per backend (that is, per device) behind a re-entrant lock, so threads that
share a device share its stream and every record or flush is atomic. A stream per thread would let a
handle recorded in one thread be read in another with nobody to flush it.

`enabled` switches recording off at run time (each op then runs at once, handles stay `LazyHandle`s):
`ember.debug.set_fusion(device, False)` is the public switch the test suite uses for "cpu-unfused".

Example:
    >>> backend = Fusion(CubeBackend())
    >>> x = backend.from_host(np.ones(4, np.float32))
    >>> y = backend.execute(registry["exp"], [x], {}, Aval((4,), f32))   # recorded, not run
    >>> backend.to_host(y).round(3)                                        # sync point
    array([2.718, 2.718, 2.718, 2.718], dtype=float32)
"""

from __future__ import annotations

import threading
from typing import Sequence

import numpy as np

from ...dtype import dtype_of
from ...ops.primitive import Aval, Primitive
from ...settings import settings
from ..base import Backend, Decorator
from .graph import Block
from .ops import records, static_params
from .plan import Plan, PlanCache
from .stream import LazyHandle, Stream


class Fusion(Decorator):
    """Lazy recording and fused execution over `inner` (see the module docstring)."""

    def __init__(self, inner: Backend, max_ops: int | None = None) -> None:
        super().__init__(inner)
        self.name = f"fusion({inner.name})"
        self.max_ops = max_ops or settings().get("fusion", "max_ops")
        # Fused kernels are compiled for the CPU runtime and run on NumPy arrays; over a device
        # runtime (Cube(wgpu), Cube(cuda)) nothing is recorded until codegen learns to launch there.
        self.records_ops = getattr(inner, "runtime", None) is None
        self.enabled = True
        self.plans = PlanCache()
        self.counts = dict.fromkeys(("recorded", "flushes", "kernels", "inner_ops", "bytes_saved", "fallbacks"), 0)
        self.observer = None
        """Called as `observer(plan, records)` at every flush (`ember.debug.explain` listens here)."""
        self._stream = Stream(static_params)
        self._lock = threading.RLock()

    # ---- the protocol ----------------------------------------------------------------------------
    def execute(self, prim: Primitive, inputs: Sequence[LazyHandle], params: dict, out: Aval) -> LazyHandle:
        if self.enabled and self.records_ops and records(prim, inputs):
            with self._lock:
                handle = self._stream.record(prim, inputs, params, out)
                self.counts["recorded"] += 1
                if len(self._stream) >= self.max_ops:
                    self.flush()
            return handle
        arrays = [self.data(h) for h in inputs]
        return LazyHandle(out, self.inner.execute(prim, arrays, params, out))

    def from_host(self, array: np.ndarray) -> LazyHandle:
        return LazyHandle(Aval(array.shape, dtype_of(array.dtype)), self.inner.from_host(array))

    def to_host(self, handle: LazyHandle) -> np.ndarray:
        return self.inner.to_host(self.data(handle))

    def sync(self) -> None:
        self.flush()
        self.inner.sync()

    # ---- sync points -----------------------------------------------------------------------------
    def data(self, handle: LazyHandle):
        """The inner backend's data of `handle`, running the stream first when it is pending."""
        if handle.record is not None:
            self.flush()
        return handle.value

    def flush(self) -> None:
        """Run every recorded op whose value is needed, and empty the stream."""
        with self._lock:
            if not len(self._stream):
                return
            records, externals, external_avals, key = self._stream.take()
            live = tuple(r.live() for r in records)
            plan = self.plans.get((key, live))
            if plan is None:
                plan = Plan(Block.of(records, externals, external_avals, live))
                self.plans.put((key, live), plan)
            if self.observer is not None:
                self.observer(plan, records)
            try:
                values = plan.run(records, externals, self.inner)
                self.counts["kernels"] += plan.kernels
                self.counts["inner_ops"] += len(plan.steps) - plan.kernels
                self.counts["bytes_saved"] += plan.bytes_saved
            except Exception:
                # A fused kernel that fails is a fusion bug: count it, and run the block op by op
                # so the program's result does not depend on it. Errors of the ops themselves recur
                # there and propagate.
                self.counts["fallbacks"] += 1
                values = self._run_unfused(records, externals, live)
            self.counts["flushes"] += 1
            for i in plan.live:
                handle = records[i].out()
                if handle is not None:
                    handle.value = values[i]
                    handle.record = None

    def _run_unfused(self, records: list, externals: list, live: tuple) -> dict:
        block = Block.of(records, externals, [None] * len(externals), live)
        values: dict = {}
        for node, rec in zip(block.nodes, records):
            if block.needed[node.index]:
                arrays = [values[i] if kind == "r" else externals[i] for kind, i in node.inputs]
                values[node.index] = self.inner.execute(rec.prim, arrays, rec.params, rec.aval)
        return values

    # ---- inspection ------------------------------------------------------------------------------
    def stats(self) -> dict:
        """Counters since creation: ops recorded, flushes, kernels and inner ops run, plan cache."""
        return {**self.counts, "plans": len(self.plans), "plan_hits": self.plans.hits,
                "plan_misses": self.plans.misses, "pending": len(self._stream)}
