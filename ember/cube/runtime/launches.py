"""Recording launches for replay: what a runtime that can replay a step (`bind`) shares.

`Plan` (ember/backend/fusion/plan.py) runs a step's first time inside `runtime.record_launches()`, and
asks `runtime.bind(launch, open_slots)` for each launch it made, marshalled once: its open slots (the
step's inputs and outputs, and scratch arrays the run allocated for itself) take new arrays at each
replay. The CPU runtime binds C calls (`cpu.BoundLaunch`), the CUDA runtime `cuLaunchKernel`s
(`cuda.BoundCudaLaunch`), a cuBLAS call (`cublas.Gemm`) and a memset (`cuda.Memset`) bind themselves.

A runtime that allocates through itself (CUDA's `empty`) also notes the arrays it allocated inside the
block (`Launches.allocations`), so that a run of several launches (a long reduction's partial sums,
then their sum) can be replayed with fresh scratch arrays; where they are not noted (the CPU's host
pool) `allocations` is None and only single launches replay.

Example:
    >>> with rt.record_launches() as launches:
    ...     rt.run(compiled, CubeCount(1), (x, y))
    >>> rt.bind(launches[0], open_slots=(0, 1)).replay((x2, y2))
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, NamedTuple


class Launch(NamedTuple):
    """One recorded launch: the compiled kernel, its cube count and its arguments."""

    compiled: Any
    count: Any
    args: tuple


class Launches(list):
    """The launches one `record_launches` block recorded, in order, and `allocations`: the arrays the
    runtime allocated inside it (None when the runtime does not note them)."""

    allocations: list | None = None


class LaunchRecorder:
    """`record_launches()` for a runtime: its `run` calls `self.recorded(...)` with each launch (and its
    `__init__` calls `LaunchRecorder.__init__`); a runtime whose `empty` calls `self.allocated(array)`
    sets `NOTES_ALLOCATIONS`."""

    NOTES_ALLOCATIONS = False

    def __init__(self) -> None:
        self._recording = threading.local()  # per thread: the list launches are recorded into, or None

    @contextmanager
    def record_launches(self):
        """Within the block, the calling thread's launches on this runtime are also recorded, as
        `Launch`es in the list this yields (what `bind` turns into a replayable launch)."""
        before = getattr(self._recording, "launches", None)
        self._recording.launches = launches = Launches()
        if self.NOTES_ALLOCATIONS:
            launches.allocations = []
        try:
            yield launches
        finally:
            self._recording.launches = before

    @contextmanager
    def unrecorded(self):
        """Within the block, the calling thread's launches and allocations are not recorded for an
        enclosing `record_launches` block (an autotuner timing its candidates inside a recorded step).

        Example:
            >>> with rt.record_launches() as launches, rt.unrecorded():
            ...     rt.run(compiled, CubeCount(1), (x, y))
            >>> len(launches)
            0
        """
        before = getattr(self._recording, "launches", None)
        self._recording.launches = None
        try:
            yield
        finally:
            self._recording.launches = before

    def recorded(self, compiled, count, args: tuple) -> None:
        """Note one launch for the enclosing `record_launches` block, if any (cheap when there is none)."""
        launches = getattr(self._recording, "launches", None)
        if launches is not None:
            launches.append(Launch(compiled, count, args))

    def allocated(self, array) -> None:
        """Note an array the runtime allocated, for the enclosing `record_launches` block, if any."""
        launches = getattr(self._recording, "launches", None)
        if launches is not None:
            launches.allocations.append(array)
