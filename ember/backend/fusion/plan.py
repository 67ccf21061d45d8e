"""Plans: the optimized form of a block, and the bounded cache that lets a training loop replay them.

A `Plan` is the list of steps `fusers.select` chose, with the inputs of each step as block refs and,
after each step, the values no later step reads (dropped at once, so peak memory stays close to the
unfused run's). Running a plan on a block with the same key reads the ops' params and shapes from
that block: nothing is re-optimized, and a fused kernel compiled for one batch size serves the next.

The key of a block is its normalized graph (`Stream` builds it while recording: op names, static
params, relative input ids, dtypes, shape classes) plus which values are still referenced.

On a runtime that can record and bind its launches (`record_launches`/`bind`), a fused step that ran
as one launch, or an inner elementwise step the library ran as one launch, is captured for one layout
of its inputs as a `StepReplay`: later runs with that layout allocate the outputs and launch with the
new data pointers, skipping codegen's views, layouts and checks. A movement op whose run made a view
of a device array replays as that view (`ViewReplay`). A plan replayed as a CUDA graph (`graphs.py`)
runs none of this.

Example:
    >>> cache = PlanCache(capacity=2)
    >>> cache.get(key) is None, cache.misses
    (True, 1)
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from ...cube.runtime.arguments import DeviceArray
from ..cube.fused.codegen import run_elementwise, run_reduction
from ..cube.fused.donation import DONATES, Donations
from .fusers import Fused, FusedReduce, Inner, select
from .ops import elementwise, reduction, replayable
from .blocks import Block
from ..cube.fused.cuda_graphs import replays_for


class Plan:
    """Steps with their input refs, and when each value can be dropped (see the module docstring)."""

    def __init__(self, block: Block, lone_broadcasts: bool = False) -> None:
        self.steps = select(block, lone_broadcasts)
        self.refs = [block.nodes[s.index].inputs if type(s) is Inner else s.inputs for s in self.steps]
        self.sources = [self._source_node(block, s) for s in self.steps]
        self.live = [n.index for n in block.nodes if n.live]
        last: dict[int, int] = {}
        for k, refs in enumerate(self.refs):
            for kind, i in refs:
                if kind == "r":
                    last[i] = k
        live = set(self.live)
        self.frees = [[] for _ in self.steps]
        for i, k in last.items():
            if i not in live:
                self.frees[k].append(i)
        self.donations = Donations.of(block, self.steps, self.refs)
        """The steps that may write their output over an input, when nothing else sees it (`donation.py`)."""
        self.ops = len(block.nodes)
        self.kernels = sum(type(s) is not Inner for s in self.steps)
        self.bytes_saved = sum(getattr(s, "bytes_saved", 0) for s in self.steps)
        self.unfused: Exception | None = None
        """Why a fused kernel of this plan failed (the fusion backend then runs its blocks op by op)."""
        self.replays: list[list] = [[] for _ in self.steps]
        """Per elementwise step, its launches captured for layouts of its inputs, as (layout, replay)
        pairs (replay None: that layout's run could not be captured; layouts hold params dicts, so
        they are compared, not hashed). Blocks of different sizes share a plan (shape classes), so a step
        keeps several layouts: the conv layers of a CNN replay the same backward plan, alternating."""
        self.captures = [type(s) is Fused or type(s) is Inner and (
            reduction(block.nodes[s.index].prim) or replayable(block.nodes[s.index].prim) or elementwise(
                block.nodes[s.index].prim, [block.aval(r).dtype for r in block.nodes[s.index].inputs]))
            for s in self.steps]
        """Which steps may be captured (fused elementwise steps, inner steps of elementwise primitives, of
        reductions and of `ops.REPLAYABLE` ones: `StepReplay.of` keeps only those the library ran as one
        launch)."""

    @staticmethod
    def _source_node(block: Block, step) -> int | None:
        """For a fused reduction, the node whose shape is the domain it reads (its input)."""
        if type(step) is FusedReduce:
            return block.nodes[step.index].inputs[0][1]
        return None

    def donated(self, externals: list) -> frozenset:
        """The steps that write their output over an input in a run on `externals` (`donation.py`)."""
        return self.donations.decide(externals) if self.donations is not None else frozenset()

    def run(self, records: list, externals: list, inner, graphs: bool = True,
            donated: frozenset | None = None) -> dict[int, Any]:
        """Compute the block; the values of the live nodes, by node index. On a runtime with CUDA
        graphs, `graphs.py` decides (it runs the plan here with `graphs=False` or replays a graph).
        `donated`: the steps that write over their donor (`donated(externals)` when None)."""
        replays = replays_for(inner) if graphs else None
        if replays is not None:
            return replays.run(self, records, externals, inner)
        if donated is None:
            donated = self.donated(externals)
        try:
            return self._run(records, externals, inner, donated)
        except Exception as error:
            if donated:  # an update may have written over its input: the block must not run again (backend.py)
                error.wrote_over_inputs = True
            raise

    def _run(self, records: list, externals: list, inner, donated: frozenset) -> dict[int, Any]:
        env: dict[int, Any] = {}
        # Fused kernels run where the inner backend's do (read here, at each run: a capture must record
        # the runtime the kernels run on).
        runtime = inner.runtime
        for k, (step, refs, source, frees) in enumerate(zip(self.steps, self.refs, self.sources, self.frees)):
            # Each input from the block's values ("r") or its externals ("x"), without a call per ref.
            arrays = [env[i] if where == "r" else externals[i] for where, i in refs]
            kind = type(step)
            if kind is Inner:
                rec = records[step.index]
                if k in donated:
                    env[step.index] = self._donating(k, rec, arrays, runtime, inner)
                elif self.captures[k]:
                    env[step.index], = self._captured(
                        k, (rec.aval, rec.params), arrays, runtime,
                        lambda: [inner.execute(rec.prim, arrays, rec.params, rec.aval)])
                else:
                    env[step.index] = inner.execute(rec.prim, arrays, rec.params, rec.aval)
            elif kind is Fused:
                shape = records[step.outputs[0]].aval.shape
                outs = self._captured(k, (shape,), arrays, runtime,
                                      lambda: run_elementwise(step.program, shape, arrays, runtime))
                for o, array in zip(step.outputs, outs):
                    env[o] = array
            else:
                domain = records[source].aval.shape
                out, = self._captured(k, (domain,), arrays, runtime,
                                      lambda: [run_reduction(step.reduction, domain, arrays, runtime)])
                env[step.index] = out.reshape(records[step.index].aval.shape)
            for i in frees:
                del env[i]
        return env

    def _donating(self, k: int, rec, arrays: list, runtime, inner):
        """Step `k`'s output, written over its donor input (`donation.py`), replayed where captured."""
        position = DONATES[rec.prim.name]
        donor = arrays[position]

        def run() -> list:
            return [inner.execute(rec.prim, arrays, rec.params, rec.aval, over=donor)]
        if not self.captures[k]:
            return run()[0]
        return self._captured(k, (rec.aval, rec.params, position), arrays, runtime, run, position)[0]

    def _captured(self, k: int, what: tuple, arrays: list, runtime, run, donor: int | None = None) -> list:
        """The outputs of step `k` (`run()`), replayed when `what` and its inputs' layout are those last
        captured (see the module docstring)."""
        if not runtime.records_launches:
            return run()
        layout = (*what, *[(a.shape, a.strides, a.dtype) for a in arrays])
        replays = self.replays[k]
        again = False
        for i, (seen, replay) in enumerate(replays):
            if seen == layout:
                if replay is not AGAIN:
                    # None: this layout's run was not one replayable launch; it is not captured again
                    return run() if replay is None else replay(arrays)
                del replays[i]
                again = True
                break
        with runtime.record_launches() as launches:
            outs = run()
        replay = StepReplay.of(layout, launches, arrays, outs, runtime, not again, donor) or ViewReplay.of(
            launches, arrays, outs, runtime)
        if replay is not AMBIGUOUS:  # else inputs shared memory this time: try again at the next run
            if len(replays) >= MAX_LAYOUTS:
                replays.clear()
            # A first run may also compile or tune (an autotuned matmul times its candidates): once more
            replays.append((layout, AGAIN if replay is None and not again else replay))
        return outs


MAX_LAYOUTS = 8
"""Layouts a step keeps captured (more, and it starts over: a loop over many sizes)."""


class StepReplay:
    """A step's launches, bound for replay on inputs of one layout (see the module docstring): their open
    slots take the inputs, the outputs and the scratch arrays the recorded run allocated for itself (a
    long reduction's partial sums), outputs and scratch allocated afresh at each replay."""

    __slots__ = ("layout", "launches", "outputs", "scratch", "empty", "donor")

    def __init__(self, layout: tuple, launches: list, outputs: list, scratch: list = (), empty=None,
                 donor: int | None = None) -> None:
        self.layout = layout
        self.launches = launches  # (bound launch, which end fills each open slot: None, all in order)
        self.outputs = outputs  # (shape, dtype) of each output
        self.scratch = scratch  # (shape, dtype) of each scratch array, the ends after the outputs
        self.empty = empty  # the runtime's allocation of an output
        self.donor = donor  # the input the (one) output is written over, else None

    @staticmethod
    def of(layout: tuple, launches: list, arrays: list, outs: list, runtime, first: bool = True,
           donor: int | None = None):
        """The replay of a step whose run made `launches` on `arrays` giving `outs`, or None when it cannot
        be replayed: each launch's arrays must be the inputs, the outputs or scratch the run allocated
        (read from their data pointers, `runtime.address`: codegen and the library pass views of them; in
        order, else found by pointer, the same input at several slots allowed), each output a new
        C-contiguous array written whole, and the other (constant) arguments apart from all of them (a
        replay keeps those as they were), never written by a run of several launches, and the runtime
        able to bind every launch. A run of several launches needs the runtime's note of what it
        allocated (`Launches.allocations`), and is not taken from a layout's `first` run (which may
        have tuned: an autotuned op times its candidates). `AMBIGUOUS` when slots were found by pointer
        and two inputs share one (the gradient standing for the unread moments of a first Adam step):
        not this run, maybe the next. `donor`: the input a one-launch step's one output was written over
        (`donation.py`); its replays write over that input again."""
        allocations = launches.allocations
        if not launches or len(launches) > 1 and (first or allocations is None):
            return None
        ends = [*arrays, *outs]
        address = runtime.address
        pointers = [address(a) for a in ends]
        if None in pointers:
            return None
        if donor is not None and (len(launches) > 1 or len(outs) != 1 or outs[0] is not arrays[donor]):
            return None
        inputs = set(pointers[:len(arrays)])
        for i, a in enumerate(outs, len(arrays)):
            if donor is None and (not a.flags.c_contiguous or pointers[i] in inputs):
                return None
        where = {p: j for j, p in enumerate(pointers)}
        several = len(launches) > 1
        # What the run allocated and is none of the ends: scratch, when a launch reads or writes it whole.
        allocated = {address(a): a for a in allocations} if several else {}
        scratch: list = []  # (shape, dtype) of each scratch array, in the order the launches meet them
        bound_launches = []
        for launch in launches:
            args = launch.args
            given = [address(a) for a in args]
            if not several and given[:len(ends)] == pointers:
                slots, order = range(len(ends)), None
            else:
                if len(set(pointers)) < len(pointers):
                    return AMBIGUOUS
                slots, order = [], []
                for i, p in enumerate(given):
                    j = where.get(p) if p is not None else None
                    if j is None and p in allocated and allocated[p].flags.c_contiguous:
                        j = where[p] = len(ends) + len(scratch)
                        scratch.append((allocated[p].shape, allocated[p].dtype))
                    if j is not None:
                        slots.append(i)
                        order.append(j)
                order = tuple(order)
                if not several and set(order) != set(range(len(ends))):
                    return None
            opened = set(slots)
            for i, j in zip(slots, order or range(len(ends))):
                if len(arrays) <= j < len(ends) and args[i].size != ends[j].size:
                    return None
            written = launch.compiled.written if several else None
            for i, c in enumerate(args):
                if i in opened or given[i] is None:
                    continue
                if written is not None and (i >= len(written) or written[i]):
                    return None  # a launch of a sequence writes an array that is none of the step's
                if any(runtime.shares_memory(c, a) for a in ends) or any(
                        runtime.shares_memory(c, a) for a in allocated.values()):
                    return None
            bound = runtime.bind(launch, slots)
            if bound is None:
                return None
            bound_launches.append((bound, order))
        if several and not set(range(len(arrays), len(ends))) <= {j for _, order in bound_launches for j in order}:
            return None  # an output no launch writes (made some other way)
        return StepReplay(layout, bound_launches, [(o.shape, o.dtype) for o in outs], scratch, runtime.empty,
                          donor)

    def __call__(self, arrays: list) -> list:
        if self.donor is not None:
            outs = [arrays[self.donor]]
        else:
            empty = self.empty
            outs = [empty(shape, dtype) for shape, dtype in self.outputs]
        ends = [*arrays, *outs]
        if self.scratch:
            ends += [self.empty(shape, dtype) for shape, dtype in self.scratch]
        for launch, order in self.launches:
            launch.replay(ends if order is None else [ends[j] for j in order])
        return outs


class ViewReplay:
    """A movement step whose run made a view of its one input, a device array (no launch): replayed as
    the same view (shape, strides, offset from the input's) of a new input of that layout, without the
    backend's dispatch (a transformer step makes hundreds of views, each a dispatch's host time)."""

    __slots__ = ("shape", "strides", "delta")

    def __init__(self, shape: tuple, strides: tuple, delta: int) -> None:
        self.shape, self.strides, self.delta = shape, strides, delta

    @staticmethod
    def of(launches: list, arrays: list, outs: list, runtime) -> "ViewReplay | None":
        """The replay of a run that launched nothing and gave a view of `arrays[0]`, else None."""
        if launches or len(arrays) != 1 or len(outs) != 1:
            return None
        x, out = arrays[0], outs[0]
        if not isinstance(x, DeviceArray) or type(out) is not type(x) or not runtime.shares_memory(out, x):
            return None  # NumPy arrays (the CPU's views cost little) and copies
        return ViewReplay(out.shape, out.strides, out.offset - x.offset)

    def __call__(self, arrays: list) -> list:
        x = arrays[0]
        return [x.strided(self.shape, self.strides, x.offset + self.delta)]


AMBIGUOUS = StepReplay((), [], [])
"""`StepReplay.of`'s answer when a launch's slots cannot be told apart by pointer this run."""
AGAIN = StepReplay((), [], [])
"""A layout whose first run was not one replayable launch: recorded once more at its next run."""


class PlanCache:
    """A bounded LRU map from block keys to plans, counting hits and misses."""

    def __init__(self, capacity: int = 512) -> None:
        self.capacity = capacity
        self.hits = 0
        self.misses = 0
        self._plans: OrderedDict = OrderedDict()

    def __len__(self) -> int:
        return len(self._plans)

    def get(self, key) -> Plan | None:
        plan = self._plans.get(key)
        if plan is None:
            self.misses += 1
            return None
        self.hits += 1
        self._plans.move_to_end(key)
        return plan

    def put(self, key, plan: Plan) -> None:
        self._plans[key] = plan
        self._plans.move_to_end(key)
        while len(self._plans) > self.capacity:
            self._plans.popitem(last=False)

    def clear(self) -> None:
        self._plans.clear()
        self.hits = self.misses = 0
