"""Choosing fusions in a block: which ops share a kernel, scored by bytes of memory traffic saved.

1. Kinds: each needed node is elementwise ("ew", `ops.elementwise`), a reduction that can read a fused
   program ("red") or anything else ("other", run by the inner backend).
2. Labels: a node's label is at least its inputs' labels, one more across an edge that cannot fuse
   (an edge fuses when both ends are elementwise ops of one shape); elementwise nodes then move as
   late as their consumers allow. Grouping fusable edges of equal labels never makes a cycle, and the
   steps run in the program's order where dependencies allow (`_in_program_order`).
3. Groups: elementwise nodes joined by fusable edges of equal labels. A group writes only the values
   still referenced (live) or read by a step outside it; one kernel may write several outputs.
4. Recompute instead of writing: a group whose outputs nobody holds and that only reductions and
   later elementwise groups of its shape read is recomputed inside each reader when reading its
   inputs again moves fewer bytes than writing its outputs and reading them back (fuse-on-read:
   `sum((x - m) ** 2)` is one kernel).

A group of one op with nothing to save runs through the inner backend's kernel library; everything
else becomes one generated kernel (a `Program`, or a `Reduction` reading one, that the inner
backend's `FusionTarget` runs). With `lone_broadcasts` (the target's: on CUDA) a lone op with an
operand broadcast along a dimension gets a generated kernel too. Why: docs/fusion.md, "Design notes".

Example:
    >>> [type(s).__name__ for s in select(block)]     # y = exp(x) * 2; s = y.sum()
    ['FusedReduce']
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from ...dtype import DType
from ...ops.program import Program
from .blocks import Block
from .ops import elementwise, reduction, static_params


@dataclass(frozen=True)
class Reduction:
    """A reduction reading value `value` of `program` (fuse-on-read)."""

    program: Program
    value: int
    op: str            # sum, prod, amax, amin
    dims: tuple        # reduced dims of the program's domain
    dtype: DType       # output dtype


@dataclass
class Inner:
    """Node `index` runs through the inner backend."""

    index: int

    @property
    def nodes(self) -> tuple:
        return (self.index,)

    @property
    def writes(self) -> tuple:
        return (self.index,)


@dataclass
class Fused:
    """An elementwise kernel: `nodes` computed, `outputs` (node indices) written, `inputs` read."""

    nodes: tuple
    inputs: tuple
    outputs: tuple
    program: Program
    bytes_saved: int

    @property
    def writes(self) -> tuple:
        return self.outputs


@dataclass
class FusedReduce:
    """A reduction (node `index`) that computes its input from `inputs` with `program` as it reads."""

    nodes: tuple
    index: int
    inputs: tuple
    reduction: Reduction
    bytes_saved: int

    @property
    def writes(self) -> tuple:
        return (self.index,)


def _kinds(block: Block) -> list:
    kinds = []
    for n in block.nodes:
        if not block.needed[n.index]:
            kinds.append(None)
        elif elementwise(n.prim, [block.aval(r).dtype for r in n.inputs]):
            kinds.append("ew")
        else:
            kinds.append("red" if reduction(n.prim) else "other")
    return kinds


def _labels(block: Block, kinds: list, fuses) -> list:
    labels = [0] * len(block.nodes)
    for n in block.nodes:
        if kinds[n.index] is not None:
            labels[n.index] = max((labels[i] + (0 if fuses(i, n.index) else 1)
                                   for kind, i in n.inputs if kind == "r"), default=0)
    for n in reversed(block.nodes):
        if kinds[n.index] == "ew":
            bounds = [labels[c] - (0 if fuses(n.index, c) else 1)
                      for c in block.consumers[n.index] if kinds[c] is not None]
            if bounds:
                labels[n.index] = max(labels[n.index], min(bounds))
    return labels


def _groups(block: Block, kinds: list, labels: list, fuses) -> list[list[int]]:
    parent = list(range(len(block.nodes)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for n in block.nodes:
        for kind, i in n.inputs:
            if kind == "r" and fuses(i, n.index) and labels[i] == labels[n.index]:
                parent[root(n.index)] = root(i)
    groups: dict[int, list[int]] = {}
    for n in block.nodes:
        if kinds[n.index] == "ew":
            groups.setdefault(root(n.index), []).append(n.index)
    return list(groups.values())


def _program(block: Block, members: list[int], outputs: list[int]) -> tuple[Program, tuple]:
    """The normalized program of `members` writing `outputs`, and the refs of its inputs."""
    inside = {m: None for m in members}
    inputs: dict[tuple, int] = {}
    for m in members:
        for ref in block.nodes[m].inputs:
            if not (ref[0] == "r" and ref[1] in inside):
                inputs.setdefault(ref, len(inputs))
    ids = dict(inputs)
    steps = []
    for m in members:
        n = block.nodes[m]
        args = tuple(ids[r] for r in n.inputs)
        ids[("r", m)] = len(inputs) + len(steps)
        steps.append((n.prim.name, static_params(n.prim, n.params), args, n.aval.dtype))
    dtypes = tuple(block.aval(r).dtype for r in inputs)
    return Program(dtypes, tuple(steps), tuple(ids[("r", o)] for o in outputs)), tuple(inputs)


def _cone(block: Block, members: list[int], value: int) -> list[int]:
    """The members `value` depends on (itself included), in order."""
    inside, keep, stack = set(members), {value}, [value]
    while stack:
        for kind, i in block.nodes[stack.pop()].inputs:
            if kind == "r" and i in inside and i not in keep:
                keep.add(i)
                stack.append(i)
    return sorted(keep)


def _traffic(block: Block, members: list[int]) -> int:
    """Bytes the members move when each runs alone: its inputs read, its output written."""
    return sum(block.nodes[m].nbytes + sum(block.nbytes(r) for r in block.nodes[m].inputs) for m in members)


def _inline_plan(block: Block, full: list[int], outputs: list[int], kinds: list, group_of: dict):
    """Whether recomputing the group `full` in each of its readers moves fewer bytes than writing
    its `outputs` and reading them back: (reductions, {reader group: values read}) or None."""
    nodes = block.nodes
    if not outputs or any(nodes[o].live for o in outputs):
        return None
    inside = set(full)
    reductions, groups, reads = [], {}, 0
    for o in outputs:
        for c in block.consumers[o]:
            if kinds[c] is None or c in inside:
                continue
            if kinds[c] == "red" and len(nodes[c].inputs) == 1:
                reductions.append(c)
            elif kinds[c] == "ew" and nodes[c].aval.shape == nodes[o].aval.shape:
                groups.setdefault(group_of[c], set()).add(o)
            else:
                return None
            reads += nodes[o].nbytes
    _, inputs = _program(block, full, outputs)
    read_inputs = sum(block.nbytes(r) for r in inputs)
    materialized = read_inputs + sum(nodes[o].nbytes for o in outputs) + reads
    if (len(reductions) + len(groups)) * read_inputs >= materialized:
        return None
    return reductions, groups


def _fused_reduce(block: Block, full: list[int], c: int, counted: set) -> FusedReduce:
    """The reduction `c` computing its input from the group `full` as it reads."""
    node = block.nodes[c]
    value = node.inputs[0][1]
    cone = _cone(block, full, value)
    program, inputs = _program(block, cone, [value])
    red = Reduction(program, program.outputs[0], node.prim.name, node.params["dims"], node.aval.dtype)
    moved = sum(block.nbytes(r) for r in inputs) + node.nbytes
    return FusedReduce(tuple(cone) + (c,), c, inputs, red, _unfused(block, cone + [c], counted) - moved)


def _unfused(block: Block, members: list[int], counted: set) -> int:
    """The traffic of `members` run one by one, counting each op once per block even when several
    kernels recompute it (so bytes saved add up over a plan)."""
    fresh = [m for m in members if m not in counted]
    counted.update(fresh)
    return _traffic(block, fresh)


def _broadcasts(block: Block, index: int) -> bool:
    """Whether node `index` reads an operand of more than one element broadcast to its shape."""
    shape = block.nodes[index].aval.shape
    return any(a.shape != shape and math.prod(a.shape) > 1 for a in map(block.aval, block.nodes[index].inputs))


def select(block: Block, lone_broadcasts: bool = False) -> list:
    """The steps that compute the block's needed values, in an order that respects dependencies; with
    `lone_broadcasts`, a lone broadcasting op is a kernel of its own (see the module docstring)."""
    kinds = _kinds(block)
    nodes = block.nodes

    def fuses(p: int, c: int) -> bool:
        return kinds[p] == "ew" and kinds[c] == "ew" and nodes[p].aval.shape == nodes[c].aval.shape

    labels = _labels(block, kinds, fuses)
    groups = sorted(_groups(block, kinds, labels, fuses), key=lambda g: (labels[g[0]], g[0]))
    group_of = {m: g for g, members in enumerate(groups) for m in members}
    extra: list[set] = [set() for _ in groups]  # members of earlier groups recomputed inside this one
    steps, taken, counted = [], set(), set()
    for g, members in enumerate(groups):
        full = sorted(set(members) | extra[g])
        inside = set(full)
        outputs = [m for m in members if nodes[m].live or any(
            c not in inside and kinds[c] is not None for c in block.consumers[m])]
        inlined = _inline_plan(block, full, outputs, kinds, group_of)
        if inlined is not None:
            reductions, readers = inlined
            steps += [_fused_reduce(block, full, c, counted) for c in reductions]
            taken.update(reductions)
            for h, values in readers.items():
                for v in values:
                    extra[h].update(_cone(block, full, v))
        elif len(full) == 1 and not (lone_broadcasts and _broadcasts(block, full[0])):
            steps.append(Inner(full[0]))
        else:
            program, inputs = _program(block, full, outputs)
            moved = sum(block.nbytes(r) for r in inputs) + sum(nodes[o].nbytes for o in outputs)
            steps.append(Fused(tuple(full), inputs, tuple(outputs), program, _unfused(block, full, counted) - moved))
    steps += [Inner(n.index) for n in nodes
              if kinds[n.index] in ("red", "other") and n.index not in taken]
    return _in_program_order(block, steps)


def _in_program_order(block: Block, steps: list) -> list:
    """`steps` in an order that respects their dependencies and otherwise runs each step when the last
    op it computes was recorded (as the program would run them one by one), so values live about as
    long as without fusion. Labels give an order as well, but it runs every step as early as it can:
    in a block of independent chains (views and matmuls are recorded too) each chain's first values
    would all be computed, and held, before any chain's last ones."""
    writer = {w: k for k, s in enumerate(steps) for w in s.writes}
    waits = [0] * len(steps)
    readers: list[list[int]] = [[] for _ in steps]
    for k, s in enumerate(steps):
        refs = block.nodes[s.index].inputs if type(s) is Inner else s.inputs
        for before in {writer[i] for kind, i in refs if kind == "r"}:
            waits[k] += 1
            readers[before].append(k)
    ready = [(max(s.nodes), k) for k, s in enumerate(steps) if not waits[k]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, k = heapq.heappop(ready)
        order.append(steps[k])
        for r in readers[k]:
            waits[r] -= 1
            if not waits[r]:
                heapq.heappush(ready, (max(steps[r].nodes), r))
    if len(order) != len(steps):
        raise AssertionError("fusion steps depend on each other in a cycle (a fusers bug)")
    return order
