"""Step replay: a fusion plan step's launches, captured for one layout of its inputs and replayed.

On a runtime that can record and bind its launches (`record_launches`/`bind`), a fused step that ran
as one launch, or an inner elementwise step the library ran as one launch, is captured for one layout
of its inputs as a `StepReplay`: later runs with that layout allocate the outputs and launch with the
new data pointers, skipping codegen's views, layouts and checks. A movement op whose run made a view
of a device array replays as that view (`ViewReplay`). `captured` is the Cube backend's
`FusionTarget.captured`; the plan keeps each step's captures (`Plan.replays`). A plan replayed as a
CUDA graph (`cuda_graphs.py`) runs none of this.

Example:
    >>> replays = []                        # a step's captures, kept by its plan
    >>> captured(replays, (shape,), [x], runtime, lambda: [runtime.run(...)])   # recorded
    >>> captured(replays, (shape,), [y], runtime, lambda: [...])                # y as x: replayed
"""

from __future__ import annotations

from typing import Callable

from ....cube.runtime.arguments import DeviceArray


def captured(replays: list, what: tuple, arrays: list, runtime, run: Callable[[], list],
             donor: int | None = None) -> list:
    """The outputs of a plan step (`run()`), replayed when `what` and its inputs' layout are those
    captured in `replays` (the step's (layout, replay) pairs, updated here; see the module docstring)."""
    if not runtime.records_launches:
        return run()
    layout = (*what, *[(a.shape, a.strides, a.dtype) for a in arrays])
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
