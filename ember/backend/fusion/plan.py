"""Plans: the optimized form of a block, and the bounded cache that lets a training loop replay them.

A `Plan` is the list of steps `fusers.select` chose, with the inputs of each step as block refs and,
after each step, the values no later step reads (dropped at once, so peak memory stays close to the
unfused run's). Running a plan on a block with the same key reads the ops' params and shapes from
that block: nothing is re-optimized, and a fused kernel compiled for one batch size serves the next.

The key of a block is its normalized graph (`Stream` builds it while recording: op names, static
params, relative input ids, dtypes, shape classes) plus which values are still referenced.

The inner backend's `FusionTarget` (`target.py`) runs the fused steps, decides donation, replays a
step's launches for a layout of its inputs (the plan keeps each step's captures, `Plan.replays`) and
may replay whole plans (`plan_replays`: CUDA graphs on the Cube backend).

Example:
    >>> cache = PlanCache(capacity=2)
    >>> cache.get(key) is None, cache.misses
    (True, 1)
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from .blocks import Block
from .fusers import Fused, FusedReduce, Inner, select
from .ops import elementwise, reduction, replayable
from .target import FusionTarget


class Plan:
    """Steps with their input refs, and when each value can be dropped (see the module docstring)."""

    def __init__(self, block: Block, target: FusionTarget) -> None:
        self.target = target
        self.steps = select(block, target.lone_broadcasts)
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
        self.donations = target.donations(block, self.steps, self.refs)
        """The steps that may write their output over an input, when nothing else sees it (donation)."""
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
        reductions and of `ops.REPLAYABLE` ones: the target keeps only those the library ran as one
        launch)."""

    @staticmethod
    def _source_node(block: Block, step) -> int | None:
        """For a fused reduction, the node whose shape is the domain it reads (its input)."""
        if type(step) is FusedReduce:
            return block.nodes[step.index].inputs[0][1]
        return None

    def donated(self, externals: list) -> frozenset:
        """The steps that write their output over an input in a run on `externals` (donation)."""
        return self.donations.decide(externals) if self.donations is not None else frozenset()

    def run(self, records: list, externals: list, inner, graphs: bool = True,
            donated: frozenset | None = None) -> dict[int, Any]:
        """Compute the block; the values of the live nodes, by node index. Where the target replays
        whole plans (`plan_replays`), that decides (it runs the plan here with `graphs=False` or
        replays it). `donated`: the steps that write over their donor (`donated(externals)` when None)."""
        replays = self.target.plan_replays() if graphs else None
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
        target = self.target
        captured = target.captured
        for k, (step, refs, source, frees) in enumerate(zip(self.steps, self.refs, self.sources, self.frees)):
            # Each input from the block's values ("r") or its externals ("x"), without a call per ref.
            arrays = [env[i] if where == "r" else externals[i] for where, i in refs]
            kind = type(step)
            if kind is Inner:
                rec = records[step.index]
                if k in donated:
                    env[step.index] = self._donating(k, rec, arrays, inner)
                elif self.captures[k]:
                    env[step.index], = captured(
                        self.replays[k], (rec.aval, rec.params), arrays,
                        lambda: [inner.execute(rec.prim, arrays, rec.params, rec.aval)])
                else:
                    env[step.index] = inner.execute(rec.prim, arrays, rec.params, rec.aval)
            elif kind is Fused:
                shape = records[step.outputs[0]].aval.shape
                outs = captured(self.replays[k], (shape,), arrays,
                                lambda: target.run_elementwise(step.program, shape, arrays))
                for o, array in zip(step.outputs, outs):
                    env[o] = array
            else:
                domain = records[source].aval.shape
                out, = captured(self.replays[k], (domain,), arrays,
                                lambda: [target.run_reduction(step.reduction, domain, arrays)])
                env[step.index] = out.reshape(records[step.index].aval.shape)
            for i in frees:
                del env[i]
        return env

    def _donating(self, k: int, rec, arrays: list, inner):
        """Step `k`'s output, written over its donor input (the target's `donates`), replayed where captured."""
        position = self.target.donates[rec.prim.name]
        donor = arrays[position]

        def run() -> list:
            return [inner.execute(rec.prim, arrays, rec.params, rec.aval, over=donor)]
        if not self.captures[k]:
            return run()[0]
        return self.target.captured(self.replays[k], (rec.aval, rec.params, position), arrays, run, position)[0]


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
