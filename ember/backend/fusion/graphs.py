"""Plan replay as CUDA graphs: a fusion plan run for the second time with the same layouts is captured
as a CUDA graph, and its later runs launch that graph (one driver call instead of one per kernel).

`Plan.run` asks `replays_for(inner)`; on an inner backend whose runtime can capture graphs
(`CudaRuntime.capture`) it gets a `GraphReplays`, which decides per plan and per *signature*: the
external inputs' shapes, strides and dtypes plus every recorded op's params (params that a plan reads
afresh at each run, a scalar say, would otherwise stay baked into the graph).

- 1st run of a signature: plain (`Plan.run(..., graphs=False)`), remembered.
- 2nd run: captured. The graph reads its *own* input arrays (`runtime.like`, one per external, the
  same layout), so each run copies the externals into them first: one device-to-device copy each.
  Requiring the same input addresses instead would almost never replay: a training step's inputs
  are last step's outputs, new arrays every step. The outputs, the intermediates and the layouts
  the kernels read stay allocated (pinned) while the graph lives; each run copies the live outputs
  into fresh arrays, because ember's tensors are immutable and the next replay rewrites the graph's.
- later runs: copy in, `replay()`, copy out, under the runtime's lock (a replay's three parts must
  not interleave with another thread's replay of the same graph).
- A capture that fails (an op that reads a value on the host, a host fallback, an allocation the
  driver refuses while capturing) runs the plan plainly and refuses that signature for good. Plans
  hold the recorded inner ops too (`ops.INNER`: views, matmuls, cat, pad, ...), captured with the
  fused kernels; one that would copy through the host (a NumPy fallback of the Cube backend) makes
  the capture fail, as the runtime refuses host copies while capturing, so that plan runs plainly. So do
  plans whose inputs and outputs exceed `[cuda] graph_max_mb`, or whose captured graph pins more:
  large plans are bound by the device, not by launches, and a graph would only hold their memory.
  At most `PER_PLAN` signatures keep a graph per plan (least recently used go).
- A plan evicted from the plan cache drops its graphs (they live in a weak map keyed by the plan),
  which frees what they pinned. Several threads may run one plan: its state changes under a lock,
  one thread captures a signature, and a replay's copies and launch hold the runtime's lock.

Switch: `[cuda] graphs = true` in ember.toml, `EMBER_CUDA_GRAPHS=0` to turn off (read when the
device's backend is first used), or `replays_for(inner).enabled = False` at run time.

Example:
    >>> replays = replays_for(ember.debug.fusion_backend(Device.cuda(0)).inner)
    >>> replays.stats()
    {'captures': 0, 'replays': 0, 'refused': 0, 'graphs': 0, 'pinned_bytes': 0}
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any

from ...settings import settings

PER_PLAN = 4
"""Signatures (input layouts) per plan that keep a captured graph."""


def signature(records: list, externals: list, array_type: type) -> tuple | None:
    """What a graph of one plan is valid for: the externals' layouts and the ops' params; None when an
    external is not a `array_type` (not on the graph's device) or a param is unhashable.

    Example:
        >>> signature(records, [x], CudaArray)
        (((4, 4), (16, 4), dtype('float32')), (3, (('dims', (1,)), ('keepdim', False))))
    """
    parts: list = []
    for a in externals:
        if type(a) is not array_type:
            return None
        parts.append((a.shape, a.strides, a.dtype))
    for rec in records:
        if rec.params:
            parts.append((rec.index, tuple(rec.params.items())))
    key = tuple(parts)
    try:
        hash(key)
    except TypeError:
        return None
    return key


class Captured:
    """One graph of a plan: the graph, the input arrays it reads, and the outputs it writes by node index."""

    __slots__ = ("graph", "inputs", "outputs")

    def __init__(self, graph, inputs: list, outputs: dict) -> None:
        self.graph = graph
        self.inputs = inputs
        self.outputs = outputs


class PlanGraphs:
    """The signatures of one plan seen once, those refused, and the graphs captured (LRU)."""

    def __init__(self) -> None:
        self.seen: set = set()
        self.capturing: set = set()  # by one thread now: the others run plainly meanwhile
        self.refused: set = set()
        self.graphs: OrderedDict = OrderedDict()


class GraphReplays:
    """CUDA graphs of the fusion plans run on one runtime (see the module docstring).

    `runtime` provides `capture(fn, warmup=False)` (a graph with `replay()`, `result`, `nbytes`,
    `close()`), `like(a)`, `copy_span(src, dst)`, `lock`, and `ARRAY` (its array type).
    """

    def __init__(self, runtime, enabled: bool = True, max_bytes: int = 64 << 20) -> None:
        self.runtime = runtime
        self.enabled = enabled
        self.max_bytes = max_bytes
        self.counts = dict.fromkeys(("captures", "replays", "refused"), 0)
        self.last_error: Exception | None = None
        """Why the last refused capture failed (None when it was refused for its size)."""
        self.reasons: dict[str, int] = {}
        """Refusals by why: "inputs+outputs" or "pinned" (over `max_bytes`), else the capture error's type."""
        self._plans: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()  # the plans' states (plans are shared by the threads' streams)

    def run(self, plan, records: list, externals: list, inner) -> dict[int, Any]:
        """`plan.run`'s result, through a graph where one is (or can now be) captured."""
        key = signature(records, externals, self.runtime.ARRAY) if self.enabled else None
        if key is None:
            return plan.run(records, externals, inner, graphs=False)
        with self._lock:
            state = self._plans.get(plan)
            if state is None:
                state = self._plans[plan] = PlanGraphs()
            found = state.graphs.get(key)
            if found is not None:
                state.graphs.move_to_end(key)
                self.counts["replays"] += 1
            busy = key in state.capturing
            first = not busy and key not in state.seen and key not in state.refused
            capture = found is None and not busy and key in state.seen
            if capture:
                state.seen.discard(key)
                state.capturing.add(key)
        if found is not None:
            return self._replay(found, externals)
        if not capture:
            values = plan.run(records, externals, inner, graphs=False)
            if first:
                too_big = _nbytes(externals) + _nbytes(values.values()) > self.max_bytes
                with self._lock:
                    if too_big:
                        self._refuse(state, key, None, "inputs+outputs")
                    else:
                        state.seen.add(key)
            return values
        why: Exception | None = None
        reason = "pinned"
        try:
            found = self._capture(plan, records, externals, inner)
        except Exception as error:  # not capturable: this signature runs plainly from now on
            found, why, reason = None, error, type(error).__name__
        else:
            if found.graph.nbytes > self.max_bytes:
                found.graph.close()
                found = None
        with self._lock:
            state.capturing.discard(key)
            if found is None:
                self._refuse(state, key, why, reason)
            else:
                self.counts["captures"] += 1
                state.graphs[key] = found
                if len(state.graphs) > PER_PLAN:  # dropped, not closed: another thread may be replaying it;
                    state.graphs.popitem(last=False)  # the graph and what it pins go with the last reference
        if found is None:
            return plan.run(records, externals, inner, graphs=False)
        return self._replay(found, externals)

    def _capture(self, plan, records: list, externals: list, inner) -> Captured:
        rt = self.runtime
        inputs = [rt.like(a) for a in externals]
        plan_ref = weakref.ref(plan)  # a graph keeping its function must not keep the plan (the weak map's key)
        graph = rt.capture(lambda: plan_ref().run(records, inputs, inner, graphs=False), warmup=False)
        return Captured(graph, inputs, {i: graph.result[i] for i in plan.live})

    def _replay(self, found: Captured, externals: list) -> dict[int, Any]:
        rt = self.runtime
        with rt.lock:
            for a, mine in zip(externals, found.inputs):
                rt.copy_span(a, mine)
            found.graph.replay()
            values = {}
            for i, out in found.outputs.items():
                values[i] = fresh = rt.like(out)
                rt.copy_span(out, fresh)
        return values

    def _refuse(self, state: PlanGraphs, key: tuple, error: Exception | None, reason: str) -> None:
        """Run this signature plainly from now on (the caller holds `_lock`)."""
        state.refused.add(key)
        self.counts["refused"] += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1
        self.last_error = error

    def stats(self) -> dict:
        """Captures, replays, refusals, graphs alive and the bytes they pin."""
        with self._lock:
            graphs = [c.graph for s in list(self._plans.values()) for c in s.graphs.values()]
        return {**self.counts, "graphs": len(graphs), "pinned_bytes": sum(g.nbytes for g in graphs)}

    def clear(self) -> None:
        """Close every graph (freeing what they pin) and forget every plan's signatures."""
        with self._lock:
            states, self._plans = list(self._plans.values()), weakref.WeakKeyDictionary()
        for state in states:
            for found in state.graphs.values():
                found.graph.close()


def _nbytes(arrays) -> int:
    return sum(a.nbytes for a in arrays)


_replays: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # inner backend -> GraphReplays | None


def replays_for(inner) -> GraphReplays | None:
    """The graph replays of `inner`'s runtime, or None when it cannot capture graphs or graphs are off
    (`[cuda] graphs`); decided once per inner backend.

    Example:
        >>> replays_for(CubeBackend()) is None   # the CPU runtime has no graphs
        True
    """
    last = _last  # every flush asks: the last answer, without the weak map's lookup
    if last is not None and last[0]() is inner:
        return last[1]
    try:
        found = _replays[inner]
    except KeyError:
        pass
    except TypeError:  # an inner backend that cannot be weakly referenced: no graphs
        return None
    else:
        _remember(inner, found)
        return found
    runtime = getattr(inner, "runtime", None)
    found = None
    if runtime is not None and hasattr(runtime, "copy_span") and hasattr(runtime, "capture") \
            and settings().get("cuda", "graphs"):
        found = _for_runtime(runtime)
    _replays[inner] = found
    _remember(inner, found)
    return found


_last: tuple | None = None  # (weak reference to an inner backend, its answer): the one most recently asked


def _remember(inner, found: GraphReplays | None) -> None:
    global _last
    _last = (weakref.ref(inner), found)


_by_runtime: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # one per runtime, shared by its backends


def _for_runtime(runtime) -> GraphReplays:
    found = _by_runtime.get(runtime)
    if found is None:
        found = _by_runtime[runtime] = GraphReplays(runtime, max_bytes=settings().get("cuda", "graph_max_mb") << 20)
    return found
