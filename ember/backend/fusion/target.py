"""The fusion hooks: what `Fusion(inner)` needs from its inner backend, and nothing more.

The generic part of fusion (recording, the block graph, choosing fusions by bytes saved, plans and
their cache) knows no kernel language: as in Burn, where the fusion layer is generic over a backend
that implements its fusion hooks, the inner backend hands the decorator a `FusionTarget` through
`inner.fusion_target()`. The target compiles and runs the fused programs `fusers.select` chose,
replays a step's launches or a whole plan where its runtime can, and decides donation. The Cube
backend's target is `ember.backend.cube.fused.CubeFusionTarget`; a backend without the method cannot
be decorated (`Fusion` raises a `DeviceError`).

Example:
    >>> target = CubeBackend(cpu_runtime()).fusion_target()
    >>> target.lone_broadcasts, target.donates
    (False, {'adam_update': 2})
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Protocol

from ...ops.program import Program
from .blocks import Block


class Donations(Protocol):
    """A plan's donation candidates (`FusionTarget.donations`)."""

    def decide(self, externals: list) -> frozenset:
        """The plan steps that write their output over their donor input in a run on `externals`."""


class PlanReplays(Protocol):
    """Whole-plan replay (CUDA graphs on the Cube backend: `FusionTarget.plan_replays`)."""

    def run(self, plan, records: list, externals: list, inner) -> dict[int, Any]:
        """`plan.run(records, externals, inner, graphs=False, ...)`'s result, or the same values replayed."""


class FusionTarget(Protocol):
    """The fusion hooks of an inner backend (see the module docstring).

    - `elementwise_ops`: the elementwise op table whose rows the target generates code for (primitive
      name -> row with `computes(dtype)` and `lowers`, as `ember.ops.elementwise.TABLE`'s).
    - `unfusable`: the errors meaning the target cannot express a fused kernel (a WGSL limit): the
      block then runs op by op, counted as "unfusable" rather than as a fusion bug.
    - `unfused_dtypes`: names of dtypes whose ops are not recorded (run at once): the target would
      compute their fused values differently (WGSL's emulated i8, u8, i16).
    - `lone_broadcasts`: a lone op with a broadcast operand becomes a generated kernel of its own
      (`fusers.select`), where that beats the backend's own kernel (CUDA).
    - `donates`: primitive name -> the input its output may be written over (`donations`); the plan
      passes that input to `inner.execute(..., over=donor)`.
    """

    elementwise_ops: Mapping[str, Any]
    unfusable: tuple[type[BaseException], ...]
    unfused_dtypes: frozenset[str]
    lone_broadcasts: bool
    donates: Mapping[str, int]

    def run_elementwise(self, program: Program, shape: tuple, arrays: list) -> list:
        """The `program.outputs` of the elementwise `program` over the domain `shape`, new arrays."""

    def run_reduction(self, reduction, domain: tuple, arrays: list) -> Any:
        """The fuse-on-read `reduction` (`fusers.Reduction`) over the domain `domain` (its input's shape)."""

    def vouch_bounds(self, array, low: int, high: int) -> None:
        """Note that the index `array` holds values in [low, high] (known from the records), so an
        indexing kernel need not read it back to check them."""

    def donations(self, block: Block, steps: list, refs: list) -> Donations | None:
        """The donation candidates of a plan of `steps` (inputs `refs`) over `block`, or None."""

    def captured(self, replays: list, what: tuple, arrays: list, run: Callable[[], list],
                 donor: int | None = None) -> list:
        """The outputs of one plan step (`run()`), replayed from the step's launches captured for
        `what` and the layout of `arrays` where the runtime can; `replays` is the step's own list of
        captures, which the target keeps (`Plan.replays`); `donor`: the input its output is written over."""

    def plan_replays(self) -> PlanReplays | None:
        """What replays whole plans on this backend's runtime, or None (then `Plan.run` runs the steps)."""
