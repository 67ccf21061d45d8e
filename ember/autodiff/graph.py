"""The recorded graph of reverse-mode autodiff and the backward walk (micrograd's idea, per primitive).

Each recorded primitive application is a `Node` that knows its primitive, params and parents. A parent is
another `Node` (a tracked tensor) or a `Const` (an input that needs no gradient). `backward` walks the
nodes in reverse topological order and calls each primitive's `vjp` rule with the cotangent of its
output, accumulating the cotangents of its parents.

A node keeps only what its primitive's `saves` names (PyTorch's saved tensors), everything else
through a weak reference, and releases it once its rule has run; released or dropped values are
recomputed from the parents when a rule asks (checkpointing keeps still less). `create_graph=True`
records the rules' own ops; `inputs=` stops the walk at given nodes; hooks see and may replace a
node's total cotangent. The rules in full: docs/autodiff.md, "What the graph keeps".

Example:
    >>> ad = Device.numpy().autodiff()
    >>> x = ember.tensor([1.0, 2.0], device=ad).require_grad()
    >>> x.grad((x * x).sum().backward())
    tensor([2., 4.], device=Device("numpy"))
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any, Callable, Iterable

from ..dtype import COMPLEX
from ..errors import ShapeError
from ..ops.primitive import Aval, Primitive, VjpContext

MAX_RECOMPUTE_DEPTH = 4

_walk = threading.local()  # `create_graph` of the backward walk running in this thread


def creating_graph() -> bool:
    """Whether the backward walk running in this thread records its rules (`create_graph=True`)."""
    return getattr(_walk, "create_graph", False)


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

    __slots__ = ("prim", "params", "parents", "aval", "_value", "_cache", "depth", "tape", "saved", "hooks",
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
        self.hooks: dict | None = None  # handle key -> fn, from Tensor.register_hook
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
                rerun = getattr(node.prim, "recompute", None)  # a composite (checkpoint) reruns itself
                node._cache = (rerun(inputs) if rerun is not None
                               else node.tape.inner.execute(node.prim, inputs, node.params, node.aval))
        return self._cache

    def release(self) -> None:
        """Drop what this node keeps for its rule (its rule has run); a later walk recomputes it. A
        leaf's value is then held by its tensor only: a parameter replaced by an optimizer step after
        the walk is not kept alive by the graph or the `Gradients` (its memory can be reused at once:
        `ember/backend/cube/fused/donation.py`); a later walk that needs it raises."""
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
        return tuple(_tensor(self.tape, p, like) for p in self.parents)

    def input_tensor(self, i: int, like):
        return _tensor(self.tape, self.parents[i], like)

    def output_tensor(self, like):
        return _tensor(self.tape, self, like)

    def add_hook(self, fn: Callable) -> "HookHandle":
        """Call `fn(grad)` with this value's cotangent in each backward walk; see `Tensor.register_hook`."""
        handle = HookHandle(self, next(_hook_keys))
        if self.hooks is None:
            self.hooks = {}
        self.hooks[handle.key] = fn
        return handle


def _tensor(tape, source: "Node | Const", like):
    """The value of `source` as a rule of a node on `tape` reads it, made like the rule's cotangent `like`
    (this package imports no tensor layer): a tensor on the inner device, or, in a walk that creates a
    graph, on the autodiff device, tracked through `source` when it is a node."""
    if getattr(_walk, "create_graph", False):  # `creating_graph()`, without its frame per value read
        return tape.wrap_tracked(like, source.primal(), source.aval, source if type(source) is Node else None)
    return like._make(like._device, source.primal(), source.aval)


class HookHandle:
    """What `Tensor.register_hook` returns: `remove()` takes the hook off (PyTorch's RemovableHandle)."""

    __slots__ = ("_node", "key")

    def __init__(self, node: Node, key: int) -> None:
        self._node = weakref.ref(node)
        self.key = key

    def remove(self) -> None:
        node = self._node()
        if node is not None and node.hooks:
            node.hooks.pop(self.key, None)


_hook_keys = itertools.count()  # a key per registered hook (a handle may be dropped while its hook stays)


def topological_order(root: "Node | Iterable[Node]", stop: "set[Node] | frozenset" = frozenset()) -> list[Node]:
    """Nodes reachable from `root` (a node or several), each after all of its parents, not walking past
    the nodes in `stop` (iterative: graphs can be deep)."""
    order: list[Node] = []
    seen: set[int] = set()
    roots = [root] if type(root) is Node else list(root)
    stack: list[tuple[Node, bool]] = [(r, False) for r in reversed(roots)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        if node in stop:
            continue
        for parent in node.parents:
            if type(parent) is Node and id(parent) not in seen:
                stack.append((parent, False))
    return order


def _leading_to(order: list[Node], targets: set[Node]) -> list[Node]:
    """The nodes of `order` (parents first) that are in `targets` or have one among their ancestors."""
    reaching: set[int] = set()
    kept = []
    for node in order:
        if node in targets or any(type(p) is Node and id(p) in reaching for p in node.parents):
            reaching.add(id(node))
            kept.append(node)
    return kept


def backward(root: "Node | Iterable[Node]", cotangent, create_graph: bool = False,
             inputs: "Iterable[Node] | None" = None, retain_graph: bool | None = None) -> dict[Node, Any]:
    """Cotangents of every leaf reachable from `root` (or of the nodes `inputs`), given the root's
    cotangent (or, for several roots, a cotangent per root).

    The cotangents are tensors on the inner device; with `create_graph`, tensors of the autodiff device
    that carry their own history (the rules' ops are recorded). The walk releases what the nodes kept
    unless `retain_graph` (by default `create_graph`), for walks that will come again soon.
    """
    roots = [root] if type(root) is Node else list(root)
    seeds = [cotangent] if type(root) is Node else list(cotangent)
    targets = None if inputs is None else set(inputs)
    order = topological_order(roots, targets or frozenset())
    if targets is not None:
        order = _leading_to(order, targets)
    pending: dict[Node, Any] = {}
    for node, seed in zip(roots, seeds):
        previous = pending.get(node)
        pending[node] = seed if previous is None else previous + seed
    found: dict[Node, Any] = {}
    retain = create_graph if retain_graph is None else retain_graph
    outer = creating_graph()
    _walk.create_graph = create_graph
    try:
        for node in reversed(order):
            g = pending.pop(node, None)
            if g is not None and node.hooks:
                g = _run_hooks(node, g)
            if g is None or node.prim is None or (targets is not None and node in targets):
                if g is not None:
                    found[node] = g
                if not retain:  # after every rule that reads it (they come later in the order)
                    node._cache = None
                    node.release()
                continue
            if node.prim.complex_rule or not _touches_complex(node):
                grads = node.prim.vjp(VjpContext(node, node.params, g), g)
            else:  # a rule for real operands: PyTorch's conjugate-Wirtinger convention (primitive.py)
                gc = g.conj()
                grads = tuple(None if pg is None else pg.conj()
                              for pg in node.prim.vjp(VjpContext(node, node.params, gc), gc))
            if not retain:
                node._cache = None  # every rule that could read this value has run
                node.release()
            for parent, pg in zip(node.parents, grads):
                if pg is None or type(parent) is not Node:
                    continue
                previous = pending.get(parent)
                pending[parent] = pg if previous is None else previous + pg
    finally:
        _walk.create_graph = outer
    return found


def _touches_complex(node: Node) -> bool:
    """Whether the output or an input of `node` is complex (a plain loop: asked of every node walked)."""
    if node.aval.dtype.category == COMPLEX:
        return True
    for parent in node.parents:
        if parent.aval.dtype.category == COMPLEX:
            return True
    return False


def _run_hooks(node: Node, g):
    """`g` after the node's hooks, in the order they were registered (a hook returning None keeps it)."""
    for fn in list(node.hooks.values()):
        replaced = fn(g)
        if replaced is None:
            continue
        if getattr(replaced, "shape", None) != g.shape:
            raise ShapeError("register_hook", f"a hook returned {_describe(replaced)} for a gradient of shape "
                                              f"{g.shape}; return a tensor of that shape, or None")
        g = replaced if replaced.device is g.device else replaced.to(g.device)
    return g


def _describe(value) -> str:
    shape = getattr(value, "shape", None)
    return f"a tensor of shape {shape}" if shape is not None else f"a {type(value).__name__}"
