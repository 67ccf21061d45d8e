"""The recorded graph of reverse-mode autodiff and the backward walk (micrograd's idea, per primitive).

Each recorded primitive application is a `Node` that knows its primitive, params and parents. A parent is
another `Node` (a tracked tensor) or a `Const` (an input that needs no gradient). `backward` walks the
nodes in reverse topological order and calls each primitive's `vjp` rule with the cotangent of its
output, accumulating the cotangents of its parents.

Values a rule needs (the op's inputs or output) are read through `Node.primal()`. Without checkpointing a
node keeps what its primitive's `saves` names (PyTorch's saved tensors): its output, strongly, when the
rule reads it, and the inputs the rule reads (`Node.saved`); every other value is held through a weak
reference, so it is freed (under fusion: never written) once the user drops it. With checkpointing,
nodes of cheap primitives (`cost == "memory"`) keep only a weak reference and the others their output:
if the user still holds a value it is reused, otherwise it is recomputed from the parents when a rule
asks for it (up to the nearest held values). A recomputed value is cached on its node until the backward
walk has passed that node, and under checkpointing a chain of cheap ops keeps every
`MAX_RECOMPUTE_DEPTH`-th value, so long residual chains never recompute from their start.

The backward walk releases what a node kept once the node's rule has run (`Node.release`), so the
activations are freed during the walk, as PyTorch frees its saved tensors. The graph can still be walked
again: a later walk recomputes the released values from the leaves and constants, which stay held.
"""

from __future__ import annotations

import weakref
from typing import Any

from ..ops.primitive import Aval, Primitive, VjpContext

MAX_RECOMPUTE_DEPTH = 4


class Const:
    """An input of a recorded op that needs no gradient; it keeps its value."""

    __slots__ = ("value", "aval")
    depth = 0

    def __init__(self, value: Any, aval: Aval) -> None:
        self.value = value
        self.aval = aval

    def primal(self) -> Any:
        return self.value


class Node:
    """A tracked value: a leaf (`prim is None`) or the output of a recorded primitive."""

    __slots__ = ("prim", "params", "parents", "aval", "_value", "_cache", "depth", "tape", "saved",
                 "__weakref__")

    def __init__(self, prim: Primitive | None, params: dict, parents: tuple, aval: Aval,
                 value: Any, tape, keep: bool = True, capped: bool = True, saved: tuple | None = None) -> None:
        self.prim = prim
        self.params = params
        self.parents = parents
        self.aval = aval
        self.tape = tape
        self.saved = saved  # the inputs the rule reads, held for it until it has run
        self._cache = None
        # How many recomputations reaching this value would chain; past the limit (when `capped`) it is kept.
        self.depth = 0 if keep or not capped else 1 + max((p.depth for p in parents), default=0)
        if keep or self.depth > MAX_RECOMPUTE_DEPTH:
            self._value, self.depth = value, 0
        else:
            try:
                self._value = weakref.ref(value)
            except TypeError:  # a backend whose handles take no weak references keeps them
                self._value, self.depth = value, 0

    def primal(self) -> Any:
        value = self._held()
        return self._recompute() if value is None else value

    def _held(self) -> Any:
        """The value if it is at hand (kept, alive elsewhere or cached), else None."""
        value = self._value
        if type(value) is weakref.ref:
            value = value()
            if value is None:
                value = self._cache
        return value

    def _recompute(self) -> Any:
        """Recompute this value and the missing values it needs, parents first (a loop, not recursion:
        after a walk has released a deep graph, a later walk may reach back to the leaves)."""
        stack = [self]
        while stack:
            node = stack[-1]
            missing = [p for p in node.parents if type(p) is Node and p._held() is None]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            if node._held() is None:
                if node.prim is None:
                    raise RuntimeError(
                        "backward(): a leaf tensor this graph reads is gone (replaced after an earlier "
                        "backward through this graph, by an optimizer step say): run every backward through "
                        "a graph before updating its parameters, or keep the old tensors")
                inputs = [p.primal() for p in node.parents]
                node._cache = node.tape.inner.execute(node.prim, inputs, node.params, node.aval)
        return self._cache

    def release(self) -> None:
        """Drop what this node keeps for its rule (its rule has run); a later walk recomputes it. A
        leaf's value is then held by its tensor only: a parameter replaced by an optimizer step after
        the walk is not kept alive by the graph or the `Gradients` (its memory can be reused at once:
        `ember/backend/fusion/donation.py`); a later walk that needs it raises."""
        self.saved = None
        value = self._value
        if type(value) is not weakref.ref:
            try:
                self._value = weakref.ref(value)
            except TypeError:  # handles without weak references stay kept
                pass

    # What a gradient rule reads, as tensors like `like` (the cotangent: a tensor on the inner device).
    @property
    def input_avals(self) -> tuple[Aval, ...]:
        return tuple(p.aval for p in self.parents)

    def parent_is_tracked(self, i: int) -> bool:
        return type(self.parents[i]) is Node

    def input_tensors(self, like) -> tuple:
        return tuple(like._make(like._device, p.primal(), p.aval) for p in self.parents)

    def input_tensor(self, i: int, like):
        parent = self.parents[i]
        return like._make(like._device, parent.primal(), parent.aval)

    def output_tensor(self, like):
        return like._make(like._device, self.primal(), self.aval)


def topological_order(root: Node) -> list[Node]:
    """Nodes reachable from `root`, each after all of its parents (iterative: graphs can be deep)."""
    order: list[Node] = []
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for parent in node.parents:
            if type(parent) is Node and id(parent) not in seen:
                stack.append((parent, False))
    return order


def backward(root: Node, cotangent) -> dict[Node, Any]:
    """Cotangents (inner tensors) of every leaf reachable from `root`, given the root's cotangent (a tensor
    on the inner device: the rules' inputs and outputs are made as tensors like it)."""
    pending: dict[Node, Any] = {root: cotangent}
    leaves: dict[Node, Any] = {}
    for node in reversed(topological_order(root)):
        g = pending.pop(node, None)
        if g is None:
            node._cache = None
            node.release()
            continue
        if node.prim is None:
            leaves[node] = g
            node.release()  # after every rule that reads it (they come later in the order)
            continue
        grads = node.prim.vjp(VjpContext(node, node.params, g), g)
        node._cache = None  # every rule that could read this value has run
        node.release()
        for parent, pg in zip(node.parents, grads):
            if pg is None or type(parent) is not Node:
                continue
            previous = pending.get(parent)
            pending[parent] = pg if previous is None else previous + pg
    return leaves
