"""Looking inside the fusion backend: what was recorded, which kernels ran, how the plan cache does.

- `explain(fn, *args)`: run `fn` and show the ops it recorded, the fused kernels chosen with the bytes
  of memory traffic each saves, and the generated C source.
- `fusion_stats(device)`: counters of the device's fusion backend (ops recorded, flushes, kernels,
  plan cache hits and misses, bytes saved).
- `set_fusion(device, enabled)`: the public switch turning recording off and on at run time (the test
  suite's "cpu-unfused" device); `EMBER_FUSION=0` / `[fusion] enabled = false` leaves the fusion layer
  out of the stack altogether.
- `live_handles()`: how many lazy handles exist (a leak check).

Example:
    >>> x = ember.randn(1000)
    >>> print(ember.debug.explain(lambda t: (t * 2).exp().sum(), x))      # doctest: +SKIP
    ops recorded (3) ...
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Callable

from .device import Device


def fusion_backend(device: Device | None = None):
    """The `Fusion` layer serving `device` (default: `Device.default()`), or None when it has none."""
    from .backend.fusion import Fusion
    backend = (device or Device.default()).inner.backend
    return backend if isinstance(backend, Fusion) else None


def _require(device: Device | None):
    backend = fusion_backend(device)
    if backend is None:
        device = device or Device.default()
        raise ValueError(f"{device!r} has no fusion layer (its backend is {device.inner.backend.name}); "
                         f"fusion serves Device.cpu() and Device.wgpu() unless EMBER_FUSION=0 or "
                         f"[fusion] enabled = false")
    return backend


def fusion_stats(device: Device | None = None) -> dict:
    """Counters of `device`'s fusion backend since it was built.

    Example:
        >>> ember.debug.fusion_stats(ember.Device.cpu())["plan_hits"]
        0
    """
    return _require(device).stats()


def set_fusion(device: Device, enabled: bool) -> bool:
    """Turn recording on `device` (and its autodiff variants) on or off; returns the previous state.

    Off, every op runs at once through the inner backend (pending work is run first).

    Example:
        >>> previous = ember.debug.set_fusion(ember.Device.cpu(), False)
    """
    backend = _require(device)
    previous = backend.enabled
    if not enabled:
        backend.flush()
    backend.enabled = bool(enabled)
    return previous


def live_handles() -> int:
    """The number of lazy handles alive in this process (pending or concrete)."""
    from .backend.fusion import LazyHandle
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is LazyHandle)


@dataclass
class Explanation:
    """What `explain` saw: per sync point, the recorded ops, the kernels chosen and the ops run alone on
    the inner backend (`inner`: views, matmuls, lone elementwise ops and reductions)."""

    ops: list[str] = field(default_factory=list)
    kernels: list[dict] = field(default_factory=list)
    inner: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"ops recorded ({len(self.ops)}):", *(f"  {op}" for op in self.ops),
                 f"fused kernels ({len(self.kernels)}):"]
        for k in self.kernels:
            lines.append(f"  {k['kind']} of {len(k['ops'])} ops [{', '.join(k['ops'])}], "
                         f"{k['bytes_saved']} bytes saved")
            lines += [f"    {line}" for line in k["program"].splitlines()]
            for source in k["sources"]:
                lines += ["    --- generated source ---", *(f"    {line}" for line in source.splitlines())]
        lines.append(f"run alone on the inner backend ({len(self.inner)}): {', '.join(self.inner)}")
        return "\n".join(lines)


def explain(fn: Callable, *args, device: Device | None = None) -> Explanation:
    """Run `fn(*args)` on the fusion backend and return (and print) what it recorded and fused.

    Example:
        >>> e = ember.debug.explain(lambda x: ((x - x.mean()) ** 2).sum(), ember.randn(100))
        >>> [k["kind"] for k in e.kernels]
        ['fused reduction']
    """
    from .backend.cube.fused.codegen import source_of
    from .backend.fusion.fusers import Fused, FusedReduce, Inner
    device = device or next((a.device for a in args if hasattr(a, "device")), None)
    backend = _require(device)
    backend.flush()  # what was recorded before belongs to someone else
    report = Explanation()

    def observe(plan, records) -> None:
        base = len(report.ops)
        for r in records:
            refs = ", ".join(f"%{base + x.index}" if hasattr(x, "prim") else "input" for x in r.inputs)
            state = "kept" if r.live() else "dropped"
            report.ops.append(f"%{base + r.index} = {r.prim.name}({refs}) -> {r.aval.dtype.name}"
                              f"{list(r.aval.shape)} [{state}]")
        for s in plan.steps:
            if type(s) is Inner:
                report.inner.append(f"%{base + s.index} {records[s.index].prim.name}")
            elif type(s) in (Fused, FusedReduce):
                report.kernels.append({"kind": "fused elementwise" if type(s) is Fused else "fused reduction",
                                       "ops": [f"%{base + i} {records[i].prim.name}" for i in s.nodes],
                                       "bytes_saved": s.bytes_saved, "step": s, "program": "",
                                       "sources": []})

    backend.observer = observe
    try:
        out = fn(*args)
        backend.sync()
    finally:
        backend.observer = None
    for k in report.kernels:
        s = k.pop("step")
        if type(s) is Fused:
            k["program"], k["sources"] = s.program.text(), source_of(s.program)
        else:
            red = s.reduction
            k["program"] = f"{red.program.text()}\n{red.op} of %{red.value} over dims {red.dims}"
            k["sources"] = source_of(red.program, red)
    del out
    print(report)
    return report
