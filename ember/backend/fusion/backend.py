"""The fusion decorator: `Fusion(inner)` records ops lazily and runs them as fused kernels at sync points.

`execute` does not run the ops `ops.records` names: it records them into the device's stream and
returns a pending `LazyHandle`. Elementwise ops and reductions become fused kernels; the other recorded
ops run through the inner backend as steps of the plan. Any other op first needs its inputs' data, so
it is a sync point; it then runs at once through the inner backend. The other sync points are
`to_host`, `sync` and `[fusion] max_ops` recorded ops. At a sync point the block is looked up in the
plan cache by its normalized key; a miss builds the plan (`fusers.select`), a hit replays it. Values
whose handles nobody holds any more are never written. An op of the block that raises when the block
runs makes its values raise when read, the error noting the op (`Failed`). The fused kernels compile
and run through the inner backend's fusion hooks, `inner.fusion_target()` (`target.py`).

Thread safety: one stream per device per thread, each behind its own lock, cut at its own sync points
only; a value pending in another thread's stream is run by that stream's flush when read.

`enabled` switches recording off at run time (each op then runs at once, handles stay `LazyHandle`s):
`ember.debug.set_fusion(device, False)` is the public switch the test suite uses for "cpu-unfused".

Example:
    >>> backend = Fusion(CubeBackend(cpu_runtime()))
    >>> x = backend.from_host(np.ones(4, np.float32))
    >>> y = backend.execute(registry["exp"], [x], {}, Aval((4,), f32))   # recorded, not run
    >>> backend.to_host(y).round(3)                                        # sync point
    array([2.718, 2.718, 2.718, 2.718], dtype=float32)
"""

from __future__ import annotations

import threading
import warnings
import weakref
from typing import Sequence

import numpy as np

from ...dtype import COMPLEX, dtype_of
from ...errors import DeviceError
from ...ops.primitive import Aval, Primitive
from ...settings import settings
from ..base import Backend, Decorator
from .blocks import Block
from .ops import _RECORDS, _STARTS, INDEX_OPS, handle_bounds, records, settle, starts_block, static_params
from .plan import Plan, PlanCache
from .stream import LazyHandle, Stream
from .target import FusionTarget


class Failed:
    """What a handle holds when the block that computes it raised (reading it raises again)."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


def _fail(records: list, error: Exception) -> None:
    """Make the held values of a block that raised `error` raise it again when read."""
    for rec in records:
        handle = rec.out()
        if handle is not None:
            handle.value, handle.record = Failed(error), None


class Fusion(Decorator):
    """Lazy recording and fused execution over `inner` (see the module docstring)."""

    def __init__(self, inner: Backend, max_ops: int | None = None) -> None:
        super().__init__(inner)
        self.name = f"fusion({inner.name})"
        self.max_ops = max_ops or settings().get("fusion", "max_ops")
        if not hasattr(inner, "fusion_target"):
            raise DeviceError(f"Fusion({inner.name}): the inner backend has no fusion hooks (`fusion_target`)")
        self.target: FusionTarget = inner.fusion_target()
        """What compiles and runs the fused plans (`target.py`)."""
        settle(self.target.elementwise_ops)
        # Ops of dtypes the inner backend cannot hold run at once (raising there); so do those whose
        # fused values the target would compute differently.
        # Complex values are never recorded, nor ops that read them (abs, real, eq): they run at once, on
        # the inner backend's complex rows (docs/complex.md).
        self._held = frozenset(d for d in self.dtypes if d.name not in self.target.unfused_dtypes and not d.is_complex)
        self.enabled = True
        self.plans = PlanCache()
        self.counts = dict.fromkeys(("recorded", "flushes", "kernels", "inner_ops", "bytes_saved", "fallbacks",
                                     "unfusable"), 0)
        self.observer = None
        """Called as `observer(plan, records)` at every flush (`ember.debug.explain` listens here)."""
        self._local = threading.local()
        self._streams: list[weakref.ref] = []  # every thread's stream, weakly: it goes with its thread
        self._shared = threading.Lock()  # the plan cache, the counters and the set of streams

    # ---- the protocol ----------------------------------------------------------------------------
    def execute(self, prim: Primitive, inputs: Sequence[LazyHandle], params: dict, out: Aval) -> LazyHandle:
        recorded = _RECORDS.get(prim)  # most primitives' answer, without a call (the dispatch hot path)
        if recorded is None:
            recorded = records(prim, inputs, params)
        if recorded and self.enabled and out.dtype in self._held:
            stream = getattr(self._local, "stream", None)
            if stream is None:  # not `or`: that would ask an empty stream its len() at every op
                stream = self._stream()
            for h in inputs:
                rec = h.record
                if rec is None:
                    if h.aval.dtype.category == COMPLEX:  # only concrete values are complex (never held)
                        return self._run_now(prim, inputs, params, out)
                elif rec.stream is not stream:
                    self._flush(rec.stream)  # another thread's pending value: run that stream first
            with stream.lock:
                if prim in _STARTS and starts_block(stream, self.max_ops):
                    self._flush(stream)  # a matmul or convolution starts a block (see ops.STARTS_BLOCK)
                handle = stream.record(prim, inputs, params, out)
                if len(stream.records) >= self.max_ops:
                    self._flush(stream)
            return handle
        return self._run_now(prim, inputs, params, out)

    def _run_now(self, prim: Primitive, inputs: Sequence[LazyHandle], params: dict, out: Aval) -> LazyHandle:
        """`prim` run at once through the inner backend (a sync point for its pending inputs)."""
        bounds = None
        if prim.name in INDEX_OPS:  # its index's bounds, known from the records before they run
            bounds = handle_bounds(inputs[1])
        arrays = [self.data(h) for h in inputs]
        if bounds:
            self.target.vouch_bounds(arrays[1], *bounds)  # the kernel library then reads nothing back (see ops.py)
        return LazyHandle.concrete(self.inner.execute(prim, arrays, params, out), out)

    def from_host(self, array: np.ndarray) -> LazyHandle:
        return LazyHandle.concrete(self.inner.from_host(array), Aval(array.shape, dtype_of(array.dtype)))

    def to_host(self, handle: LazyHandle) -> np.ndarray:
        return self.inner.to_host(self.data(handle))

    def value_bounds(self, handle: LazyHandle) -> tuple[int, int] | None:
        return handle_bounds(handle) or None

    def sync(self) -> None:
        self.flush()
        self.inner.sync()

    # ---- sync points -----------------------------------------------------------------------------
    def data(self, handle: LazyHandle):
        """The inner backend's data of `handle`, running its stream first when it is pending."""
        rec = handle.record
        if rec is not None:
            self._flush(rec.stream)
        value = handle.value
        if type(value) is Failed:
            error = value.error
            notes = "".join(f" ({note})" for note in getattr(error, "__notes__", ()))
            raise RuntimeError(f"this value was not computed: its block raised {error!r}{notes}") from error
        return value

    def flush(self) -> None:
        """Run what every thread has recorded on this device."""
        with self._shared:
            refs = tuple(self._streams)  # a tuple of refs, not a WeakSet's iteration: every sync asks
        for ref in refs:
            stream = ref()
            if stream is not None:
                self._flush(stream)

    def pending(self) -> int:
        """How many ops the calling thread has recorded and not run yet."""
        return len(self._stream())

    def _stream(self) -> Stream:
        stream = getattr(self._local, "stream", None)
        if stream is None:
            stream = self._local.stream = Stream(static_params)
            with self._shared:  # the streams of ended threads leave the list here
                self._streams = [r for r in self._streams if r() is not None] + [weakref.ref(stream)]
        return stream

    def _flush(self, stream: Stream) -> None:
        """Run every op of `stream` whose value is needed, and empty it."""
        with stream.lock:
            if not stream.records:
                return
            records, externals, external_avals, live, key = stream.take()
            with self._shared:
                plan = self.plans.get(key)
                if plan is None:
                    plan = Plan(Block.of(records, externals, external_avals, live), self.target)
                    self.plans.put(key, plan)
            if self.observer is not None:
                self.observer(plan, records)
            failed = unfusable = 0
            cause = plan.unfused
            if cause is None:
                try:
                    values = plan.run(records, externals, self.inner)
                except Exception as error:
                    cause = error
            if cause is not None and getattr(cause, "wrote_over_inputs", False):
                # An optimizer update wrote over its input (donation, `target.py`): running the block
                # again op by op would read the new state as the old one. Its values raise instead.
                _fail(records, cause)
                raise cause
            if cause is not None:
                # A kernel the target cannot express (`target.unfusable`) is expected; any other failure
                # of a fused kernel is a fusion bug. Either way the block runs op by op, so the
                # program's result does not depend on it; errors of the ops themselves recur there
                # and propagate. The plan remembers the failure: its replays go op by op at once.
                try:
                    values = self._run_unfused(records, externals, live)
                except Exception as error:
                    _fail(records, error)
                    raise
                if isinstance(cause, self.target.unfusable):
                    unfusable = 1
                else:
                    failed = 1
                    if not plan.unfused:
                        warnings.warn(f"{self.name}: a fused kernel failed and its block ran op by op "
                                      f"(a fusion bug): {cause!r}", RuntimeWarning, stacklevel=2)
                plan.unfused = cause
            with self._shared:
                counts = self.counts
                counts["recorded"] += len(records)
                counts["flushes"] += 1
                counts["fallbacks"] += failed
                counts["unfusable"] += unfusable
                if not failed and not unfusable:
                    counts["kernels"] += plan.kernels
                    counts["inner_ops"] += len(plan.steps) - plan.kernels
                    counts["bytes_saved"] += plan.bytes_saved
            for i in plan.live:
                handle = records[i].out()
                if handle is not None:
                    handle.value = values[i]
                    handle.record = None

    def _run_unfused(self, records: list, externals: list, live: bytes) -> dict:
        block = Block.of(records, externals, [None] * len(externals), live)
        values: dict = {}
        for node, rec in zip(block.nodes, records):
            if block.needed[node.index]:
                arrays = [values[i] if kind == "r" else externals[i] for kind, i in node.inputs]
                try:
                    values[node.index] = self.inner.execute(rec.prim, arrays, rec.params, rec.aval)
                except Exception as error:
                    error.add_note(f"raised by {rec.prim.name} (inputs {[a.shape for a in arrays]}, params "
                                   f"{rec.params}), recorded by {self.name} and run at a sync point")
                    raise
        return values

    # ---- inspection ------------------------------------------------------------------------------
    def stats(self) -> dict:
        """Counters since creation: ops recorded, flushes, kernels and inner ops run, plan cache."""
        return {**self.counts, "plans": len(self.plans), "plan_hits": self.plans.hits,
                "plan_misses": self.plans.misses, "pending": self.pending()}
