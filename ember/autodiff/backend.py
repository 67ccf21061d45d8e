"""The autodiff decorator: a backend that wraps another and records what needs a gradient.

Handles of an autodiff backend are `Tracked(primal, node, aval)`: the inner backend's handle, and the
graph node when the value needs a gradient (`None` for constants and detached values). An op whose
inputs are all untracked, or that runs under `ember.no_grad()`, or whose primitive has no gradient rule,
records nothing and costs one inner call and one small object.

Example:
    >>> device = Device.cpu().autodiff(checkpointing="balanced")
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..backend.base import Decorator, Backend
from ..dtype import dtype_of
from ..ops.primitive import Aval, Primitive
from . import CHECKPOINTING
from .grad_mode import grad_enabled
from .graph import Const, Node


class Tracked:
    """An autodiff handle: the inner value, its graph node (or None) and its abstract value."""

    __slots__ = ("primal", "node", "aval")

    def __init__(self, primal: Any, node: Node | None, aval: Aval) -> None:
        self.primal = primal
        self.node = node
        self.aval = aval


class Autodiff(Decorator):
    """Reverse-mode autodiff over `inner`; `checkpointing="balanced"` recomputes cheap ops in backward."""

    def __init__(self, inner: Backend, checkpointing: str | None = None) -> None:
        super().__init__(inner)
        if checkpointing not in CHECKPOINTING:
            raise ValueError(f"unknown checkpointing strategy {checkpointing!r}; known: {CHECKPOINTING}")
        self.name = f"autodiff({inner.name})"
        self.checkpointing = checkpointing
        self._saves: dict[tuple, tuple] = {}  # (prim, which inputs are tracked) -> prim.saves(tracked)

    def execute(self, prim: Primitive, inputs: Sequence[Tracked], params: dict, out: Aval) -> Tracked:
        result = self.inner.execute(prim, [h.primal for h in inputs], params, out)
        node = None
        if prim.vjp is not None:
            tracked = tuple([h.node is not None for h in inputs])
            if True in tracked and grad_enabled():  # the thread-local is read last: it costs the most
                node = self._node(prim, inputs, tracked, params, out, result)
        handle = _new(Tracked)  # Tracked's fields set here: no __init__ frame on the dispatch hot path
        handle.primal, handle.node, handle.aval = result, node, out
        return handle

    def _node(self, prim: Primitive, inputs: Sequence[Tracked], tracked: tuple, params: dict, out: Aval,
              result: Any) -> Node:
        """The graph node recording `prim(inputs)` (whose inputs `tracked` says are tracked)."""
        parents = tuple([h.node if h.node is not None else Const(h.primal, h.aval) for h in inputs])
        if self.checkpointing is None:  # keep what the rule reads (`Primitive.saves`), nothing more
            key = (prim, tracked)
            found = self._saves.get(key)
            if found is None:  # a rule reads the same values whenever the same inputs are tracked
                found = self._saves[key] = prim.saves(tracked)
            read, keep = found
            saved = tuple([inputs[i].primal for i in read if tracked[i]]) if read else None
            return Node(prim, params, parents, out, result, self, keep, False, saved)
        return Node(prim, params, parents, out, result, self, prim.cost == "compute")

    def from_host(self, array: np.ndarray) -> Tracked:
        return Tracked(self.inner.from_host(array), None, Aval(array.shape, dtype_of(array.dtype)))

    def to_host(self, handle: Tracked) -> np.ndarray:
        return self.inner.to_host(handle.primal)

    def value_bounds(self, handle: Tracked) -> tuple[int, int] | None:
        return self.inner.value_bounds(handle.primal)

    # The bridge between this layer and the inner device.
    def lift(self, inner_handle: Any, aval: Aval) -> Tracked:
        """An inner value as an untracked handle of this backend (no copy)."""
        return Tracked(inner_handle, None, aval)

    def leaf(self, handle: Tracked) -> Tracked:
        """The same value as a fresh leaf that collects a gradient."""
        return Tracked(handle.primal, Node(None, {}, (), handle.aval, handle.primal, self), handle.aval)

    def wrap_tracked(self, like, inner_handle: Any, aval: Aval, node: Node | None):
        """A tensor like `like` (a tensor of this autodiff device) around an inner handle, tracked through
        `node`: what rules compute with when the backward walk creates a graph."""
        return like._make(like._device, Tracked(inner_handle, node, aval), aval)


_new = object.__new__
