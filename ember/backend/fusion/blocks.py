"""The block graph: a cut of the stream seen as a dataflow graph the optimizer can reason about.

Every op is a `Node` with its inputs as refs: `("r", i)` is the output of node `i` of the block,
`("x", j)` the block's `j`-th external (already computed) array. A node is `live` when its handle is
still held outside the stream: its value must be written to memory. `needed` marks the nodes whose
value is used at all (live, or read by a needed node); the rest are dropped unseen.

Example:
    >>> block = Block.of(records, externals, external_avals)
    >>> [n.prim.name for n in block.nodes], block.consumers[0]
    (['exp', 'sum'], [1])
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...ops.primitive import Aval, Primitive
from .stream import Record


@dataclass
class Node:
    """One op of a block (see the module docstring for refs)."""

    index: int
    prim: Primitive
    params: dict
    inputs: tuple
    aval: Aval
    live: bool

    @property
    def nbytes(self) -> int:
        return math.prod(self.aval.shape) * self.aval.dtype.itemsize


@dataclass
class Block:
    """The nodes of one block, their external inputs' avals, consumers and which values are needed."""

    nodes: list[Node]
    external_avals: list[Aval]
    consumers: list[list[int]] = field(default_factory=list)
    needed: list[bool] = field(default_factory=list)

    @staticmethod
    def of(records: list, externals: list, external_avals: list[Aval], live: bytes | list[bool]) -> "Block":
        """The graph of recorded ops reading `externals` (whose avals are `external_avals`); `live[i]` is
        true when record i's handle is still held (a sequence of bools, or `Stream.take`'s bytes)."""
        slots = {id(a): j for j, a in enumerate(externals)}
        nodes = []
        for rec, is_live in zip(records, live):
            refs = tuple(("r", x.index) if type(x) is Record else ("x", slots[id(x)]) for x in rec.inputs)
            nodes.append(Node(rec.index, rec.prim, rec.params, refs, rec.aval, bool(is_live)))
        block = Block(nodes, list(external_avals))
        block._link()
        return block

    def _link(self) -> None:
        self.consumers = [[] for _ in self.nodes]
        for n in self.nodes:
            for kind, i in n.inputs:
                if kind == "r" and n.index not in self.consumers[i]:
                    self.consumers[i].append(n.index)
        self.needed = [n.live for n in self.nodes]
        for n in reversed(self.nodes):
            if self.needed[n.index]:
                for kind, i in n.inputs:
                    if kind == "r":
                        self.needed[i] = True

    def aval(self, ref: tuple) -> Aval:
        """The abstract value a ref points at."""
        kind, i = ref
        return self.nodes[i].aval if kind == "r" else self.external_avals[i]

    def nbytes(self, ref: tuple) -> int:
        aval = self.aval(ref)
        return math.prod(aval.shape) * aval.dtype.itemsize
