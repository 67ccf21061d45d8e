"""Donation: an optimizer update writes its new state over the previous one when nothing else can see it.

A plan step of a primitive in `DONATES` (Adam's update, `ember.optim.fused.adam_update`) may write its
output over the input named there (the *donor*), as PyTorch's optimizers update in place, only where
no one could tell. `Donations.of` finds the candidates when the plan is made, `decide` checks them at
each run, before any step runs. A donor is written over only when:

- it is an external of the block and the update is not a first step (`first` reads no state); on a
  device it owns its memory (not a view), on the CPU it is the array over a host pool slice;
- no step after the update reads its memory: neither the donor, nor an external viewing it, nor a
  value a movement op of the block made from them (`ALIASING`: such a value that the block hands out
  forbids the donation). The update's kernel reads all of element i before it writes element i;
- nothing outside the block holds the donor or a view of its memory: the CPython reference counts of
  the donor, its views (and on the CPU the host pool's buffer) are exactly those the block accounts
  for. A user who kept the old parameter, the old state or a `state_dict` of it gets a new array.

A wrong count can only refuse, never donate wrongly. The plan passes the donor as
`execute(..., over=donor)`, which reaches the op's forward as `out=`. Devices without fusion never
donate; a failed block that may have written over an input raises. Why: docs/fusion.md.

Example:
    >>> donations = Donations.of(block, plan.steps, plan.refs)
    >>> donations.decide(externals)           # the plan steps that write over their donor this run
    frozenset({7})
"""

from __future__ import annotations

import math
import sys
from collections import Counter

from ....cube.runtime.arguments import DeviceArray
from ...fusion.fusers import Inner

DONATES = {"adam_update": 2}
"""Primitive name -> the input its output may be written over (Adam's previous packed state; the kernel
checks that the parameter it reads is that state's first row or other memory)."""
ALIASING = frozenset(("reshape", "permute", "expand", "slice", "flip", "cat", "pad", "slice_assign"))
"""Primitives whose output may be (a view of) their first input's memory: movement ops, and a `cat` or
`pad` that has nothing to add."""


class Donations:
    """A plan's donation candidates and the static facts `decide` checks them with."""

    __slots__ = ("candidates", "slots", "last")

    def __init__(self, candidates: list, slots: Counter, last: dict) -> None:
        self.candidates = candidates  # (step k, the external j it may write over)
        self.slots = slots            # external -> how many record inputs hold it
        self.last = last              # external -> the last step reading its memory (inf: a value of the block)

    @staticmethod
    def of(block, steps: list, refs: list) -> "Donations | None":
        """The candidates of a plan whose steps are `steps` with inputs `refs` over `block`, or None."""
        candidates = []
        for k, step in enumerate(steps):
            if type(step) is Inner:
                node = block.nodes[step.index]
                position = DONATES.get(node.prim.name)
                if position is not None and not node.params.get("first", False) and node.inputs[position][0] == "x":
                    candidates.append((k, node.inputs[position][1]))
        if not candidates:
            return None
        # How long each external's memory is read: by the steps reading it, or a view of it a step made
        # (a movement op's output may be a view), to the end when such a view is a value of the block.
        last: dict[int, float] = {}
        alias: dict[int, int] = {}  # node index -> the external its value may view
        for k, (step, step_refs) in enumerate(zip(steps, refs)):
            for kind, i in step_refs:
                root = i if kind == "x" else alias.get(i)
                if root is not None:
                    last[root] = max(last.get(root, k), k)
            if type(step) is Inner and block.nodes[step.index].prim.name in ALIASING:
                kind, i = step_refs[0]
                root = i if kind == "x" else alias.get(i)
                if root is not None:
                    alias[step.index] = root
                    if block.nodes[step.index].live:
                        last[root] = math.inf
        candidates = [(k, j) for k, j in candidates if last[j] == k]
        if not candidates:
            return None
        slots = Counter(i for node in block.nodes for kind, i in node.inputs if kind == "x")
        return Donations(candidates, slots, last)

    def decide(self, externals: list) -> frozenset:
        """The steps that write over their donor in a run on `externals` (see the module docstring)."""
        views = _views(externals)
        chosen = []
        for k, j in self.candidates:
            if self._sole(externals, k, j, views):
                chosen.append(k)
        return frozenset(chosen)

    def _sole(self, externals: list, k: int, j: int, views: dict) -> bool:
        """Whether external `j`, and every external viewing its memory, is held by the block alone and
        read by no step after `k`. Each external is held by the `externals` list once and by its records'
        inputs (`slots`); a view holds the array it was made from (a device array's `owner`, a NumPy
        array's `base`); the host pool's buffer is held by the NumPy arrays over it. `getrefcount` adds
        its argument, and the name here one more."""
        donor = externals[j]
        if isinstance(donor, DeviceArray):
            if donor.owner is not None:
                return False  # a view: its memory has an owner the block may not see
            buffer = None
            on_buffer: list = []
        else:
            buffer = getattr(donor, "base", None)
            if buffer is None or not hasattr(buffer, "_slice"):
                return False  # not the root of a host pool slice
            on_buffer = [i for i in views.get(id(buffer), ()) if i != j]
        on_donor = views.get(id(donor), [])
        last, slots = self.last, self.slots
        for i in on_donor + on_buffer:
            view = externals[i]
            if last.get(i, -1) > k or sys.getrefcount(view) != 3 + slots[i]:
                return False
        if sys.getrefcount(donor) != 3 + slots[j] + len(on_donor):
            return False
        return buffer is None or sys.getrefcount(buffer) == 3 + len(on_buffer)


def _views(externals: list) -> dict[int, list[int]]:
    """The id of the array or buffer each view among `externals` holds -> the views' positions. (A
    function of its own: a loop's last name would hold an external while `_sole` counts references.)"""
    views: dict[int, list[int]] = {}
    for i, x in enumerate(externals):
        held = x.owner if isinstance(x, DeviceArray) else getattr(x, "base", None)
        if held is not None:
            views.setdefault(id(held), []).append(i)
    return views
