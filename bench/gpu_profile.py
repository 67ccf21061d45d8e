"""Where a GPU training step's time goes: device time per kernel (CUPTI, through torch.profiler) against the
step's wall time, and the host's Python time (cProfile), for the workloads of `bench/gpt.py`.

    python -m bench.gpu_profile gpt|encoder ember|torch [--out DIR] [--profiled 2] [bench.gpt options]

Runs 2 warm-up steps, times `--timed` plain steps (wall, median), then (ember) `--profiled` steps timing
the host's wait in the CUDA stream synchronize (`sync_wait_ms`: the rest of the wall time is host work, so
near zero means the GPU waits on the host), then `--profiled` steps under torch.profiler with CUDA activities only: CUPTI records every kernel, copy and memset of the process, so
ember's kernels (driver API launches in the device's primary context, cuBLAS through CuPy) appear beside
torch's own. From the trace: GPU busy time per step (the union of the device intervals), the
kernel time summed by kernel name (largest first), and the gaps. Then, for ember, `--profiled` steps
under cProfile (host functions by own and cumulative time) and the fusion counters per step, then
`--profiled` steps with the plan runs' host time split by what each step ran (`host_by_step`: a fused
kernel, a fused reduction, or an inner op by primitive; calls and microseconds per step; the rest of the
wall time is recording, autodiff, the optimizer's Python and the final wait). Writes
`<workload>_<impl>.txt` under `--out` (the summary's JSON line, then the tables) and prints the summary.
Without torch (a CPU dry run) the device trace is left out.

Example:
    >>> python -m bench.gpu_profile gpt ember --out /tmp/prof --steps 3
    {"workload": "gpt", "impl": "ember", "wall_ms": 170.2, "gpu_busy_ms": 68.0, ...}
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench import gpt


def kernel_class(name: str) -> str:
    """A kernel name without `void `, its argument list and trailing hashes/digits, cut to 110 characters,
    so the specializations of one kernel sum together while torch's template arguments (which say
    what an elementwise kernel computes) stay.

    Example:
        >>> kernel_class("fused_reduce_17_ab12cd")
        'fused_reduce'
    """
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"\((?!\)).*$", "", name) if "<" not in name else name
    name = re.sub(r"(_[0-9a-f]{6,}|_\d+)+$", "", name)
    return name[:110]


def device_events(trace_path: str) -> list[tuple[str, str, float, float, str]]:
    """(category, name, start us, duration us, launch shape) of every kernel, copy and memset in a chrome
    trace; the shape is `grid x block` for a kernel, else ''."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    out = []
    for e in events:
        cat = e.get("cat", "")
        if cat in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e:
            a = e.get("args", {})
            shape = f"{a.get('grid')}x{a.get('block')}" if cat == "kernel" else ""
            out.append((cat, e.get("name", "?"), float(e["ts"]), float(e["dur"]), shape))
    return out


def busy_time(events: list) -> tuple[float, float, float]:
    """(union of the intervals, first start, last end) in us."""
    spans = sorted((e[2], e[2] + e[3]) for e in events)
    total, end = 0.0, -1e30
    for lo, hi in spans:
        if hi <= end:
            continue
        total += hi - max(lo, end)
        end = hi
    return total, (spans[0][0] if spans else 0.0), (spans[-1][1] if spans else 0.0)


def table(events: list, steps: int, top: int, by_shape: bool = False) -> tuple[str, list]:
    """Kernel time per step by kernel class (`by_shape`: by class and launch shape), largest first, as
    text and rows."""
    by: dict = {}
    for cat, name, _, dur, shape in events:
        key = (cat, kernel_class(name) if cat == "kernel" else name)
        if by_shape:
            key = (cat, f"{key[1][:60]} {shape}")
        n, t = by.get(key, (0, 0.0))
        by[key] = (n + 1, t + dur)
    total = sum(t for _, t in by.values()) or 1.0
    rows = sorted(((t / steps / 1e3, n / steps, cat, name) for (cat, name), (n, t) in by.items()), reverse=True)
    lines = [f"{'ms/step':>9} {'calls':>7} {'share':>6}  kind    name"]
    for ms, calls, cat, name in rows[:top]:
        lines.append(f"{ms:9.3f} {calls:7.1f} {100 * ms * steps * 1e3 / total:5.1f}%  {cat[:7]:7} {name}")
    return "\n".join(lines), [dict(ms=round(ms, 4), calls=calls, kind=cat, name=name) for ms, calls, cat, name in rows]


def sync_wait(step, n: int) -> float:
    """Milliseconds per step that ember's host spends waiting in the CUDA stream synchronize (the rest of the
    step's wall time is host work: Python, recording, planning, launching). Near zero means the GPU waits on the host."""
    try:
        from ember.cube.runtime.cuda import CudaRuntime
    except ImportError:
        return 0.0
    original = CudaRuntime.synchronize
    waited = [0.0]

    def timed(self) -> None:
        t0 = time.perf_counter()
        try:
            original(self)
        finally:
            waited[0] += time.perf_counter() - t0
    CudaRuntime.synchronize = timed
    try:
        for _ in range(n):
            step()
    finally:
        CudaRuntime.synchronize = original
    return waited[0] * 1e3 / n


def host_by_step(step, n: int) -> str:
    """Host time of `n` steps' plan runs, split by plan step: each fused kernel, fused reduction and inner
    op (by primitive) timed around its call in `Plan.run` (the wrappers cost ~1 us a call). A table of
    calls and milliseconds per step, largest first, with the share of the step's wall time."""
    from collections import Counter
    from ember.backend.cube.fused import target as fused
    from ember.backend.fusion import plan as plans

    spent, calls = Counter(), Counter()

    def timed(kind, fn):
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[kind] += time.perf_counter() - t0
                calls[kind] += 1
        return wrapper

    def run(self, records, externals, inner, graphs=True):
        if "execute" in vars(inner):  # a graph capture running the plan inside a timed run
            return original_run(self, records, externals, inner, graphs)
        execute = inner.execute
        inner.execute = lambda prim, *a: timed("inner " + prim.name, execute)(prim, *a)
        try:
            return timed("plan runs (all of the below, and replays)", original_run)(
                self, records, externals, inner, graphs)
        finally:
            del inner.execute  # the instance attribute: the class's method shows again

    original_run = plans.Plan.run
    originals = fused.run_elementwise, fused.run_reduction
    fused.run_elementwise = timed("fused elementwise (not replayed)", fused.run_elementwise)
    fused.run_reduction = timed("fused reduction (not replayed)", fused.run_reduction)
    plans.Plan.run = run
    t0 = time.perf_counter()
    try:
        for _ in range(n):
            step()
    finally:
        fused.run_elementwise, fused.run_reduction = originals
        plans.Plan.run = original_run
    wall = (time.perf_counter() - t0) / n
    lines = [f"wall {wall * 1e3:.1f} ms/step (timers included)", "      ms   calls  %wall  what"]
    for kind, seconds in spent.most_common():
        lines.append(f"{seconds * 1e3 / n:8.2f} {calls[kind] / n:7.0f} {100 * seconds / n / wall:5.1f}%  {kind}")
    return "\n".join(lines)


def trace(torch, step, n: int, top: int, summary: dict) -> tuple[str, list]:
    """Run `n` steps under torch.profiler (CUDA activities: CUPTI); add the device figures to `summary` and
    return the kernel table (text, rows)."""
    from torch.profiler import ProfilerActivity, profile
    activity = ProfilerActivity.CUDA if torch.cuda.is_available() else ProfilerActivity.CPU  # CPU: a dry run
    with profile(activities=[activity]) as prof:
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        prof_wall = (time.perf_counter() - t0) * 1e3 / n
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        events = device_events(path)
    busy, first, last = busy_time(events)
    text, rows = table(events, n, top)
    text += f"\n\n== device time per step by kernel class and launch shape (grid x block)\n{table(events, n, top, True)[0]}"
    kernels = [e for e in events if e[0] == "kernel"]
    summary.update(profiled_wall_ms=round(prof_wall, 2), gpu_busy_ms=round(busy / n / 1e3, 2),
                   gpu_span_ms=round((last - first) / n / 1e3, 2), kernels_per_step=len(kernels) / n,
                   kernel_ms=round(sum(e[3] for e in kernels) / n / 1e3, 2),
                   copies_per_step=sum(e[0] == "gpu_memcpy" for e in events) / n,
                   copy_ms=round(sum(e[3] for e in events if e[0] == "gpu_memcpy") / n / 1e3, 3),
                   memsets_per_step=sum(e[0] == "gpu_memset" for e in events) / n)
    return text, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=".")
    parser.add_argument("--profiled", type=int, default=2, help="steps under each profiler")
    parser.add_argument("--timed", type=int, default=3, help="plain steps timed before profiling")
    parser.add_argument("--top", type=int, default=45)
    ours, rest = parser.parse_known_args(argv)
    args = gpt.parse(rest)
    out = Path(ours.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        import torch
    except ImportError:  # a CPU dry run without torch: no device trace
        torch = None
    if torch is not None and torch.cuda.is_available():
        torch.cuda.init()  # the primary context, which ember's CUDA runtime shares
    if args.impl == "ember":
        step, device = gpt.ember_workload(args)
    else:
        step, device = gpt.torch_workload(args, compiled=args.impl == "torch.compile"), None
    for _ in range(2):
        step()
    walls = []
    for _ in range(ours.timed):
        t0 = time.perf_counter()
        step()
        walls.append((time.perf_counter() - t0) * 1e3)
    n = ours.profiled
    summary = dict(workload=args.workload, impl=args.impl, wall_ms=[round(w, 2) for w in walls],
                   wall_median_ms=round(statistics.median(walls), 2))
    if args.impl == "ember":
        summary["sync_wait_ms"] = round(sync_wait(step, n), 2)
    text, rows = "(no torch: no device trace)", []
    if torch is not None:
        text, rows = trace(torch, step, n, ours.top, summary)
    report = io.StringIO()
    report.write(f"== device time per step by kernel class ({n} steps)\n{text}\n")
    if args.impl == "ember":
        import ember.debug
        fusion = ember.debug.fusion_backend(device)
        before = dict(fusion.stats()) if fusion is not None else {}
        pr = cProfile.Profile()
        t0 = time.perf_counter()
        pr.enable()
        for _ in range(n):
            step()
        pr.disable()
        summary["cprofile_wall_ms"] = round((time.perf_counter() - t0) * 1e3 / n, 2)
        after = dict(fusion.stats()) if fusion is not None else {}
        summary["fusion_per_step"] = {k: (v - before.get(k, 0)) / n for k, v in after.items()
                                      if isinstance(v, (int, float))}
        from ember.backend.cube.fused.cuda_graphs import replays_for
        replays = replays_for(fusion.inner) if fusion is not None else None
        summary["graphs"] = replays.stats() if replays is not None else None
        if replays is not None:
            summary["graph_refusals"] = dict(replays.reasons, last_error=repr(replays.last_error)[:200])
        st = device.memory_stats()
        summary["peak_in_use_MiB"] = round(st.peak_in_use / 2**20, 1)
        summary["peak_reserved_MiB"] = round(st.peak_reserved / 2**20, 1)
        report.write(f"\n== host: plan runs by step ({n} steps)\n{host_by_step(step, n)}\n")
        for key in ("tottime", "cumtime"):
            report.write(f"\n== host: cProfile over {n} steps, by {key}\n")
            pstats.Stats(pr, stream=report).sort_stats(key).print_stats(60)
    report.write("\n== all rows\n" + "\n".join(json.dumps(r) for r in rows) + "\n")
    stem = f"{args.workload}_{args.impl}"
    (out / f"{stem}.txt").write_text(json.dumps(summary) + "\n\n" + report.getvalue())
    print(json.dumps(summary), flush=True)
    print("\n".join(text.split("\n")[:26]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
