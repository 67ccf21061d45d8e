"""`Composite`: a recorded call of a Python function as one graph node (`ember.checkpoint`, `ember.func`).

Its gradient rule is the function's own (rerun it and walk the rerun's graph); `recompute` gives the
node's value again when checkpointing asks. It is never bound as an op.

Example:
    >>> node = Node(Composite("checkpoint", vjp, recompute), {}, reads, aval, value, tape)
"""

from __future__ import annotations

from typing import Any, Callable

from ..ops.primitive import Primitive, saves_none


class Composite(Primitive):
    """A recorded call of a Python function: `vjp` reruns it; `recompute` gives its value again."""

    __slots__ = ("recompute",)

    def __init__(self, name: str, vjp: Callable, recompute: Callable[[list], Any]) -> None:
        super().__init__(name, infer=_no_infer, reference=_no_infer, vjp=vjp, cost="compute", saves=saves_none)
        self.recompute = recompute


def _no_infer(*args, **kwargs):
    raise RuntimeError("a composite node is never bound as an op")
