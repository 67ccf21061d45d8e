"""`CubeFusionTarget`: the Cube backend's fusion hooks (`ember.backend.fusion.target.FusionTarget`).

Fused programs compile for the backend's runtime (`ember.cube.runtime.base.Runtime`) through the
generated kernels of `codegen.py`; a step's launches replay through `launches.py`, whole plans as
CUDA graphs through `cuda_graphs.py` (where the runtime captures graphs), and optimizer updates write
over their previous state as `donation.py` decides. The runtime is read at each call, so a capture
records the runtime the kernels run on.

Example:
    >>> target = CubeFusionTarget(CubeBackend(cpu_runtime()))
    >>> p = Program((f32,), (("exp", (), (0,), f32),), (1,))
    >>> target.run_elementwise(p, (2,), [np.zeros(2, np.float32)])
    [array([1., 1.], dtype=float32)]
"""

from __future__ import annotations

from typing import Callable

from ....cube.runtime.arguments import vouch_bounds
from ....ops.elementwise import TABLE
from ....ops.program import Program
from ...fusion.blocks import Block
from ...fusion.fusers import Reduction
from .codegen import run_elementwise, run_reduction
from .cuda_graphs import GraphReplays, replays_for
from .donation import DONATES, Donations
from .launches import captured


class CubeFusionTarget:
    """The fusion hooks of `inner`, a `CubeBackend` (see the module docstring)."""

    elementwise_ops = TABLE
    donates = DONATES
    vouch_bounds = staticmethod(vouch_bounds)

    def __init__(self, inner) -> None:
        self.inner = inner
        runtime = inner.runtime
        self.unfusable = (*runtime.TARGET_ERRORS, *runtime.LIMIT_ERRORS)
        self.unfused_dtypes = frozenset(runtime.UNFUSED_DTYPES)
        # On CUDA a generated kernel beats the library's for a lone op with a broadcast operand.
        self.lone_broadcasts = runtime.target == "cuda"

    def run_elementwise(self, program: Program, shape: tuple, arrays: list) -> list:
        return run_elementwise(program, shape, arrays, self.inner.runtime)

    def run_reduction(self, reduction: Reduction, domain: tuple, arrays: list):
        return run_reduction(reduction, domain, arrays, self.inner.runtime)

    def donations(self, block: Block, steps: list, refs: list) -> Donations | None:
        return Donations.of(block, steps, refs)

    def captured(self, replays: list, what: tuple, arrays: list, run: Callable[[], list],
                 donor: int | None = None) -> list:
        return captured(replays, what, arrays, self.inner.runtime, run, donor)

    def plan_replays(self) -> GraphReplays | None:
        return replays_for(self.inner)
