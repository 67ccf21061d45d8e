"""Plans: the optimized form of a block, and the bounded cache that lets a training loop replay them.

A `Plan` is the list of steps `fusers.select` chose, with the inputs of each step as block refs and,
after each step, the values no later step reads (dropped at once, so peak memory stays close to the
unfused run's). Running a plan on a block with the same key reads the ops' params and shapes from
that block: nothing is re-optimized, and a fused kernel compiled for one batch size serves the next.

The key of a block is its normalized graph (`Stream` builds it while recording: op names, static
params, relative input ids, dtypes, shape classes) plus which values are still referenced.

Example:
    >>> cache = PlanCache(capacity=2)
    >>> cache.get(key) is None, cache.misses
    (True, 1)
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from .codegen import run_elementwise, run_reduction
from .fusers import Fused, FusedReduce, Inner, select
from .graph import Block


class Plan:
    """Steps with their input refs, and when each value can be dropped (see the module docstring)."""

    def __init__(self, block: Block) -> None:
        self.steps = select(block)
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
        self.ops = len(block.nodes)
        self.kernels = sum(type(s) is not Inner for s in self.steps)
        self.bytes_saved = sum(getattr(s, "bytes_saved", 0) for s in self.steps)
        self.unfused: Exception | None = None
        """Why a fused kernel of this plan failed (the fusion backend then runs its blocks op by op)."""

    @staticmethod
    def _source_node(block: Block, step) -> int | None:
        """For a fused reduction, the node whose shape is the domain it reads (its input)."""
        if type(step) is FusedReduce:
            return block.nodes[step.index].inputs[0][1]
        return None

    def run(self, records: list, externals: list, inner) -> dict[int, Any]:
        """Compute the block; the values of the live nodes, by node index."""
        env: dict[int, Any] = {}
        runtime = getattr(inner, "runtime", None)  # fused kernels run where the inner backend's do

        def value(ref: tuple):
            kind, i = ref
            return env[i] if kind == "r" else externals[i]

        for step, refs, source, frees in zip(self.steps, self.refs, self.sources, self.frees):
            kind = type(step)
            if kind is Inner:
                rec = records[step.index]
                env[step.index] = inner.execute(rec.prim, [value(r) for r in refs], rec.params, rec.aval)
            elif kind is Fused:
                shape = records[step.outputs[0]].aval.shape
                for o, array in zip(step.outputs, run_elementwise(step.program, shape, [value(r) for r in refs], runtime)):
                    env[o] = array
            else:
                out = run_reduction(step.reduction, records[source].aval.shape, [value(r) for r in refs],
                                    runtime)
                env[step.index] = out.reshape(records[step.index].aval.shape)
            for i in frees:
                del env[i]
        return env


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
