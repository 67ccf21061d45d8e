"""Plan replay as CUDA graphs: a fusion plan run for the second time on the same inputs *at the same
addresses* is captured as a CUDA graph, and its later runs there launch that graph.

`Plan.run` asks its target's `plan_replays()`, a `GraphReplays` where the runtime captures graphs; it
decides per plan and per *key* (the externals' shapes, strides, dtypes and addresses, the ops' params,
the plan's donation decision).

- 1st run of a key: plain (`Plan.run(..., graphs=False)`), remembered.
- 2nd run: captured with the pool's `trace` on, then launched; the graph pins only layout arrays.
- later runs: the trace is replayed (`MemoryPool.retake`); when every slice it takes is free at its
  captured place, the graph is launched and its outputs wrapped over those slices (`runtime.over`).
  Otherwise everything is given back and the plan runs plainly (`mismatched`); the graph is dropped
  and the key counts as seen once.
- A failed capture, or a trace that frees or keeps memory the run did not, refuses that layout.
- Bounds: `PER_PLAN` graphs per plan (LRU), `SEEN` keys, `SPARE`, `RETRY`. Thread safe.

Switch: `[cuda] graphs`, `EMBER_CUDA_GRAPHS=0`, or `replays_for(inner).enabled = False` at run time.
Why and the details: docs/cuda.md, "Fusion plans as CUDA graphs".

Example:
    >>> replays = replays_for(ember.debug.fusion_backend(Device.cuda(0)).inner)
    >>> replays.stats()
    {'captures': 0, 'replays': 0, 'mismatched': 0, 'refused': 0, 'graphs': 0, 'pinned_bytes': 0}
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any

from ....settings import settings

PER_PLAN = 64
"""Keys (input layouts and addresses) per plan that keep a captured graph: a plan shared by a model's
layers meets each layer's inputs at their own addresses)."""
SEEN = 256
"""Keys per plan remembered as seen once, waiting for a second run to capture."""
SPARE = 4
"""Captures a plan may have beyond its replays: a capture costs a plain run's host time again and more,
so a plan whose keys come back once and never again (a loop whose addresses creep) stops capturing."""
RETRY = 64
"""Plain runs after which a plan past its `SPARE` captures may capture once more."""


def signature(records: list, externals: list, array_type: type) -> tuple | None:
    """What a graph of one plan is valid for, but for addresses: the externals' layouts and the ops'
    params; None when an external is not a `array_type` (not on the graph's device) or a param is
    unhashable.

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
    """One graph of a plan with its pool trace and how to make its outputs.

    `events`: per pool call of the captured run, `(nbytes, page, offset)` for a slice handed out, or the
    index of the handed-out slice given back. `outputs`: node index -> `(take, shape, dtype, view)`, the
    output a C-contiguous array over slice number `take` (then `view`, its (shape, strides, offset) when
    it is a view of that array, else None), or `(-1 - j, shape, strides, delta)`, a view of external
    `j` at `delta` bytes from it, or `(None, shape, dtype, None)`, an empty array."""

    __slots__ = ("graph", "events", "outputs")

    def __init__(self, graph, events: list, outputs: dict) -> None:
        self.graph = graph
        self.events = events
        self.outputs = outputs

    @staticmethod
    def of(graph, trace: list, values: dict, externals: list, runtime) -> "Captured | None":
        """The replayable form of a capture whose run gave `values` and left the pool `trace`, or None
        when the trace does not account for its memory (see the module docstring)."""
        takes: dict[int, int] = {}  # id of a slice handed out -> its number (the trace keeps them alive)
        events: list = []
        held: set = set()
        for event in trace:
            if type(event) is tuple:
                nbytes, piece = event
                held.add(len(takes))
                takes[id(piece)] = len(takes)
                events.append((nbytes, piece.page, piece.offset))
            else:
                k = takes.get(id(event))
                if k is None or k not in held:
                    return None  # memory the run did not take
                held.discard(k)
                events.append(k)
        outputs: dict = {}
        kept: set = set()  # the slices under outputs
        for i, a in values.items():
            if type(a) is not runtime.ARRAY:
                return None
            memory = runtime.memory_of(a)
            k = takes.get(id(memory)) if memory is not None else None
            if k is not None:
                if k not in held and k not in kept:
                    return None  # an output over memory the run gave back
                held.discard(k)
                kept.add(k)
                root = a if a.owner is None else a.owner
                view = None if a is root else (a.shape, a.strides, a.offset)
                outputs[i] = (k, root.shape, root.dtype, view)
            elif a.nbytes == 0:
                outputs[i] = (None, a.shape, a.dtype, None)
            else:
                j = next((j for j, x in enumerate(externals) if x is a), None)  # an input written over
                if j is None:
                    j = next((j for j, x in enumerate(externals) if runtime.shares_memory(a, x)), None)
                if j is None:
                    return None
                outputs[i] = (-1 - j, a.shape, a.strides, a.offset - externals[j].offset)
        if held:
            return None  # memory the run took and kept without returning it
        return Captured(graph, events, outputs)

    def replay(self, runtime, externals: list) -> dict[int, Any] | None:
        """This graph's outputs for a run on `externals` (at the captured addresses), or None when a
        captured slice is not free now (nothing taken or launched then)."""
        pool = runtime.pool
        with runtime.lock, pool.deferring():  # as while it was captured: a page the graph writes goes back after its launch
            taken = pool.retake(self.events)
            if taken is None:
                return None
            try:
                self.graph.replay()
            except BaseException:
                for piece in taken:
                    if piece is not None:
                        pool.free_later(piece)
                raise
        values: dict[int, Any] = {}
        roots: dict[int, Any] = {}
        for i, (k, shape, kind, view) in self.outputs.items():
            if k is None:
                values[i] = runtime.empty(shape, kind)
            elif k < 0:
                x = externals[-1 - k]
                same = view == 0 and shape == x.shape and kind == x.strides  # the input itself (written over)
                values[i] = x if same else x.strided(shape, kind, x.offset + view)
            else:
                root = roots.get(k)
                if root is None:
                    root = roots[k] = runtime.over(taken[k], shape, kind)
                values[i] = root if view is None else root.strided(*view)
        return values


class PlanGraphs:
    """The keys of one plan seen once, the layouts refused, and the graphs captured (LRU)."""

    def __init__(self) -> None:
        self.seen: set = set()
        self.capturing: set = set()  # by one thread now: the others run plainly meanwhile
        self.refused: set = set()  # layouts (keys without addresses)
        self.graphs: OrderedDict = OrderedDict()
        self.captured = self.replayed = 0  # graphs captured and launched, over the plan's life
        self.plain = 0  # plain runs since the last capture


class GraphReplays:
    """CUDA graphs of the fusion plans run on one runtime (see the module docstring).

    `runtime` provides `capture(fn, warmup=False, keep=False)` (a graph with `replay()`, `result`,
    `nbytes`, `close()`), a `pool` with `trace`, `reserve(nbytes)`, `over(slice, shape, dtype)`,
    `memory_of(a)`, `address(a)`, `shares_memory(a, b)`, `empty(shape, dtype)`, `lock`, and `ARRAY`.
    """

    def __init__(self, runtime, enabled: bool = True) -> None:
        self.runtime = runtime
        self.enabled = enabled
        self.counts = dict.fromkeys(("captures", "replays", "mismatched", "refused"), 0)
        self.last_error: Exception | None = None
        """Why the last refused capture failed (None when its trace was refused)."""
        self.reasons: dict[str, int] = {}
        """Refusals by why: "trace" (memory the trace does not account for), else the capture error's type."""
        self._plans: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()  # the plans' states (plans are shared by the threads' streams)

    def run(self, plan, records: list, externals: list, inner) -> dict[int, Any]:
        """`plan.run`'s result, through a graph where one is (or can now be) captured."""
        layout = signature(records, externals, self.runtime.ARRAY) if self.enabled else None
        if layout is None:
            return plan.run(records, externals, inner, graphs=False)
        address = self.runtime.address
        donated = plan.donated(externals)  # a graph writes over the donors it was captured writing over
        key = (layout, tuple([address(a) for a in externals]), donated)
        with self._lock:
            state = self._plans.get(plan)
            if state is None:
                state = self._plans[plan] = PlanGraphs()
            found = state.graphs.get(key)
            capture = False
            if found is not None:
                state.graphs.move_to_end(key)
            elif layout not in state.refused and key not in state.capturing:
                capture = key in state.seen and (state.captured < state.replayed + SPARE or state.plain >= RETRY)
                if capture:
                    state.seen.discard(key)
                    state.capturing.add(key)
                    state.plain = 0
                else:
                    if len(state.seen) >= SEEN:
                        state.seen.clear()
                    state.seen.add(key)
            if found is None and not capture:  # a plain run (counted here, under the lock already held)
                state.plain += 1
        if found is not None:
            values = found.replay(self.runtime, externals)
            with self._lock:
                self.counts["mismatched" if values is None else "replays"] += 1
                state.replayed += values is not None
                if values is None and state.graphs.get(key) is found:
                    # Its inputs are where they were but its own slices land elsewhere now (a loop's
                    # layout still settling when it was captured): the next run with this key captures
                    # again, rather than every later run mismatching the same way.
                    del state.graphs[key]
                    state.seen.add(key)
            return plan.run(records, externals, inner, False, donated) if values is None else values
        if not capture:
            return plan.run(records, externals, inner, False, donated)
        why: Exception | None = None
        try:
            values, found = self._capture(plan, records, externals, inner, donated)
        except Exception as error:  # not capturable: this layout runs plainly from now on
            values, found, why = None, None, error
        with self._lock:
            state.capturing.discard(key)
            if found is None:
                self._refuse(state, layout, why, "trace" if why is None else type(why).__name__)
            else:
                self.counts["captures"] += 1
                state.captured += 1
                state.graphs[key] = found
                if len(state.graphs) > PER_PLAN:  # dropped, not closed: another thread may be replaying it;
                    state.graphs.popitem(last=False)  # the graph goes with the last reference
        return plan.run(records, externals, inner, False, donated) if values is None else values

    def _capture(self, plan, records: list, externals: list, inner,
                 donated: frozenset) -> tuple[dict, Captured | None]:
        """This run's values through a new graph, and the graph's replayable form (None: its trace
        does not account for its memory; the values are right either way)."""
        rt = self.runtime
        plan_ref = weakref.ref(plan)  # a graph keeping its function must not keep the plan (the weak map's key)
        pool = rt.pool
        # No other work between the capture and its launch (the run's freed slices are reused after it); a
        # page the run empties goes back to the device after the launch.
        with rt.lock, pool.deferring():
            pool.trace = trace = []
            try:
                graph = rt.capture(lambda: plan_ref().run(records, externals, inner, False, donated),
                                   warmup=False, keep=False)
                graph.replay()
            finally:
                pool.trace = None
        values, graph.result = graph.result, None  # the graph must not keep its outputs (their slices)
        return values, Captured.of(graph, trace, values, externals, rt)

    def _refuse(self, state: PlanGraphs, layout: tuple, error: Exception | None, reason: str) -> None:
        """Run this layout plainly from now on (the caller holds `_lock`)."""
        state.refused.add(layout)
        self.counts["refused"] += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1
        self.last_error = error

    def stats(self) -> dict:
        """Captures, replays, trace mismatches, refusals, graphs alive and the bytes they pin (layouts)."""
        with self._lock:
            graphs = [c.graph for s in list(self._plans.values()) for c in s.graphs.values()]
        return {**self.counts, "graphs": len(graphs), "pinned_bytes": sum(g.nbytes for g in graphs)}

    def clear(self) -> None:
        """Close every graph and forget every plan's keys."""
        with self._lock:
            states, self._plans = list(self._plans.values()), weakref.WeakKeyDictionary()
        for state in states:
            for found in state.graphs.values():
                found.graph.close()


_replays: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # inner backend -> GraphReplays | None


def replays_for(inner) -> GraphReplays | None:
    """The graph replays of `inner`'s runtime, or None when it cannot capture graphs or graphs are off
    (`[cuda] graphs`); decided once per inner backend.

    Example:
        >>> replays_for(CubeBackend(cpu_runtime())) is None   # the CPU runtime has no graphs
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
    runtime = inner.runtime
    found = None
    if runtime.graphs and settings().get("cuda", "graphs"):
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
        found = _by_runtime[runtime] = GraphReplays(runtime)
    return found
