"""GPU benchmarks: ember's CUDA kernels against PyTorch (and cuBLAS) on the same card, in one run.

    python -m bench.gpu [cases...] [--json PATH] [--results PATH] [--quick]

Cases (default: all):
- `matmul`: bf16 8192^3; the cube tensor-core kernel alone (default tile), every tile variant, the
  autotuned choice (tiles + cuBLAS through CuPy) and torch.matmul (cuBLAS) -> TFLOP/s;
- `gelu`: a user-written cube GELU (erf form) over 2^28 f32 against a device-to-device copy of the
  same bytes (the bandwidth ceiling) and torch's GELU -> TB/s;
- `softmax`, `layer_norm`: (8192, 8192) f32 over the last dim, ember's library against torch eager;
- `tiny_ops`: host time per op of 100 tiny adds: eager launches, the chain replayed as a CUDA graph
  (`CudaRuntime.capture`), torch eager and the chain as a torch CUDA graph (`torch.cuda.graph`);
- `plan_replay`: host time per op of a 100-op elementwise chain on a 4x4 tensor through Device.cuda(0)
  (recorded, then its cached fusion plan run at the sync) with the plan's CUDA graph on and off, and
  torch eager;
- `encoder`, `gpt`: training steps of bench/gpt.py (transformer_encoder fwd+bwd; a GPT-2-small step with
  AdamW, tf32, the vocabulary padded to 50304, the head tied) in ember, torch eager and torch.compile
  (the peers of bench/torch_models.py: causal SDPA, fused AdamW), each in its own process -> ms/step
  and peak memory (ember's pool peaks; torch's max_memory_allocated / reserved), each ember row with its
  ratio to each torch row (`vs_torch`, `vs_torch.compile`; >1: ember slower); `gpt_reduced` the GPT
  step at sizes ember fits, against the same two peers; `gpt_autocast` the GPT step with forward and
  loss under bf16 autocast (`ember.autocast` against `torch.autocast`);
- peak memory where measurable: ember's pool peak against torch.cuda.max_memory_allocated for the
  same op.

Every time is the median of CUDA-event timings (each over several back-to-back calls) after warm-up,
ember's on its runtime's stream and torch's on torch's. Inputs are random (never zeros); outputs are
checked against torch before timing. Prints a table last; `--json` writes the rows; `--results` writes
them as `python -m bench --json` does (`report_rows`), the input of `python -m bench --report`.

Example:
    >>> python -m bench.gpu matmul --json /tmp/gpu.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time

import numpy as np

from ember import cube

from .harness import Row, write_json


@cube.function
def gelu_of(v):
    return 0.5 * v * (1.0 + cube.erf(v * 0.7071067811865476))


@cube.kernel
def gelu_kernel(x: cube.Array, y: cube.Array):
    """y = x * Phi(x), four consecutive elements per unit (one 16-byte access each way for f32)."""
    base = cube.ABSOLUTE_POS * 4
    if base + 3 < len(x):
        for lane in cube.unroll(range(4)):
            y[base + lane] = gelu_of(x[base + lane])
    else:
        for lane in cube.unroll(range(4)):
            if base + lane < len(x):
                y[base + lane] = gelu_of(x[base + lane])


class Bench:
    """Times ember (CUDA runtime stream) and torch callables with CUDA events; collects rows."""

    def __init__(self, quick: bool) -> None:
        import torch
        from ember.cube.runtime.cuda import cuda_runtime
        self.torch = torch
        self.rt = cuda_runtime(0)
        self.repeats = 3 if quick else 7
        self.rows: list[dict] = []

    def time_ember(self, fn, inner: int = 5) -> float:
        fn()
        self.rt.synchronize()
        return statistics.median(self.rt.time(fn, repeat=inner, warmup=1) for _ in range(self.repeats))

    def time_torch(self, fn, inner: int = 5) -> float:
        torch = self.torch
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(self.repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / inner)
        return statistics.median(times)

    def row(self, case: str, impl: str, ms: float, unit: str, amount: float, **extra) -> None:
        rate = amount / (ms * 1e-3) / 1e12
        self.rows.append(dict(case=case, impl=impl, ms=round(ms, 4), rate=round(rate, 2), unit=unit, **extra))
        print(f"{case:34s} {impl:28s} {ms:9.4f} ms {rate:8.2f} {unit}  "
              + " ".join(f"{k}={v}" for k, v in extra.items()), flush=True)


def to_torch(bench: Bench, x) -> "torch.Tensor":
    """A torch copy of a device array or an ember tensor (through the host; outside any timing)."""
    import ml_dtypes
    torch = bench.torch
    host = x.numpy()
    if host.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(host.view(np.int16)).cuda().view(torch.bfloat16)
    return torch.from_numpy(host).cuda()


def rel_error(bench: Bench, got, want) -> float:
    torch = bench.torch
    got = to_torch(bench, got).double()
    want = want.double()
    return float(torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want))


def case_matmul(b: Bench) -> None:
    import ml_dtypes
    from ember.kernels.matmul_tc import (GROUP_TILES, TILES, GroupTile, Tile, cuda_matmul_autotuner,
                                              group_tiles_run, matmul_tc)
    from ember.cube.runtime.cublas import cublas_available, cublas_matmul
    torch = b.torch
    n = 8192
    flops = 2.0 * n ** 3
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n), np.float32).astype(ml_dtypes.bfloat16)
    B = rng.standard_normal((n, n), np.float32).astype(ml_dtypes.bfloat16)
    a, bb = b.rt.to_device(A), b.rt.to_device(B)
    ta, tb = to_torch(b, a), to_torch(b, bb)
    want = ta @ tb
    case = f"matmul bf16 {n}^3"
    # The library's candidates, then a few more shapes (more planes per cube, deeper pipelines).
    sweep = TILES + tuple(Tile(*t) for t in ((128, 128, 64, 64, 64, 3, 4), (128, 128, 64, 64, 64, 3, 16),
                                             (128, 128, 64, 64, 64, 4), (256, 128, 64, 64, 64, 3, 16),
                                             (128, 128, 64, 64, 32, 3)))
    for i, tile in enumerate(sweep):
        err = rel_error(b, matmul_tc(b.rt, a, bb, tile), want)
        ms = b.time_ember(lambda: matmul_tc(b.rt, a, bb, tile), inner=3)
        name = f"cube tc {tile.bm}x{tile.bn}x{tile.bk} w{tile.wm}x{tile.wn} s{tile.stages} g{tile.group}" + \
            (" (default)" if i == 0 else "" if tile in TILES else " (sweep)")
        b.row(case, name, ms, "TFLOP/s", flops, rel_error=f"{err:.1e}")
    # The plane-group (wgmma) kernel on sm_90: the library's tiles, then a few more.
    groups = GROUP_TILES + tuple(GroupTile(*t) for t in ((256, 128, 4, 4), (256, 128, 4, 16), (256, 128, 3),
                                                          (256, 192, 3), (128, 256, 3)))
    for i, tile in enumerate(groups if group_tiles_run(b.rt) else ()):
        err = rel_error(b, matmul_tc(b.rt, a, bb, tile), want)
        ms = b.time_ember(lambda: matmul_tc(b.rt, a, bb, tile), inner=3)
        name = f"cube group {tile.bm}x{tile.bn}x64 s{tile.stages} g{tile.group}" + \
            (" (default)" if i == 0 else "" if tile in GROUP_TILES else " (sweep)")
        b.row(case, name, ms, "TFLOP/s", flops, rel_error=f"{err:.1e}")
    if cublas_available()[0]:
        err = rel_error(b, cublas_matmul(b.rt, a, bb), want)
        b.row(case, "cuBLAS via CuPy (ember stream)", b.time_ember(lambda: cublas_matmul(b.rt, a, bb), inner=3),
              "TFLOP/s", flops, rel_error=f"{err:.1e}")
    tuner = cuda_matmul_autotuner(b.rt, level="balanced")
    start = time.perf_counter()
    choice = tuner.choose(a, bb)
    tune_s = time.perf_counter() - start
    err = rel_error(b, tuner(a, bb), want)
    b.row(case, "ember autotuned", b.time_ember(lambda: tuner(a, bb), inner=3), "TFLOP/s", flops,
          choice=choice, tuning_s=round(tune_s, 1), rel_error=f"{err:.1e}")
    import ember
    device = ember.Device.cuda(0)
    ea, eb = (ember.tensor(x, device=device) for x in (A, B))
    err = rel_error(b, ember.matmul(ea, eb), want)

    def tensor_matmul():  # the fusion layer records the product: the sync runs it (and waits)
        product = ember.matmul(ea, eb)  # held over the sync: a value nobody holds is never computed
        device.sync()
        return product
    b.row(case, "ember Device.cuda tensor matmul", b.time_ember(tensor_matmul, inner=3), "TFLOP/s", flops,
          rel_error=f"{err:.1e}")
    b.row(case, "torch.matmul", b.time_torch(lambda: ta @ tb, inner=3), "TFLOP/s", flops)
    del a, bb, ta, tb, want
    torch.cuda.empty_cache()


def case_gelu(b: Bench) -> None:
    torch = b.torch
    n = 1 << 28
    moved = 2.0 * 4 * n  # read once, written once
    x = b.rt.to_device(np.random.default_rng(1).standard_normal(n, np.float32))
    y = b.rt.empty(n, np.float32)
    count, dim = cube.CubeCount(-(-n // (4 * 256))), cube.CubeDim(256)
    gelu = lambda: gelu_kernel.launch(count, dim, x, y)
    tx = to_torch(b, x)
    gelu()
    err = rel_error(b, y, torch.nn.functional.gelu(tx))
    case = "gelu f32 2^28"
    b.row(case, "ember cube custom_gelu", b.time_ember(gelu), "TB/s", moved, rel_error=f"{err:.1e}")
    b.row(case, "device-to-device copy (ember)", b.time_ember(lambda: b.rt.copy(x, y)), "TB/s", moved)
    b.row(case, "torch gelu", b.time_torch(lambda: torch.nn.functional.gelu(tx)), "TB/s", moved)
    b.row(case, "torch copy_", b.time_torch(lambda: torch.empty_like(tx).copy_(tx)), "TB/s", moved)
    del x, y, tx


def _rows_op(b: Bench, name: str, ember_fn, torch_fn, tensor_fn) -> None:
    from ember.cube.runtime.cuda import CudaRuntime
    torch = b.torch
    shape = (8192, 8192)
    moved = 2.0 * 4 * shape[0] * shape[1]
    host = np.random.default_rng(2).standard_normal(shape, np.float32)
    x = b.rt.to_device(host)
    tx = to_torch(b, x)
    err = rel_error(b, ember_fn(x), torch_fn(tx))
    case = f"{name} f32 8192x8192"
    # Peak memory beyond the input for one call: a fresh runtime (its own pool) for ember, torch's
    # max_memory_allocated for torch.
    fresh = CudaRuntime(0)
    fx = fresh.to_device(host)
    before = fresh.pool.stats().in_use
    out = ember_fn(fx)
    fresh.synchronize()
    ember_peak = fresh.pool.stats().peak_in_use - before
    ember_reserved = fresh.pool.stats().peak_reserved
    del out, fx
    fresh.pool.cleanup()
    b.row(case, "ember", b.time_ember(lambda: ember_fn(x)), "TB/s", moved, rel_error=f"{err:.1e}",
          peak_extra_MiB=round(ember_peak / 2**20, 1), peak_reserved_MiB=round(ember_reserved / 2**20, 1))
    import ember
    ex = ember.tensor(host, device=ember.Device.cuda(0))
    device = ember.Device.cuda(0)

    def tensor_op():  # Device.cuda is fused: the op is recorded, and runs at the sync (while the
        out = tensor_fn(ex)  # result is referenced: an unreferenced one would never be written)
        device.sync()
        return out
    b.row(case, "ember Device.cuda tensor op", b.time_ember(tensor_op), "TB/s", moved,
          rel_error=f"{rel_error(b, tensor_fn(ex), torch_fn(tx)):.1e}")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    torch_fn(tx)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    b.row(case, "torch eager", b.time_torch(lambda: torch_fn(tx)), "TB/s", moved,
          peak_extra_MiB=round(peak / 2**20, 1))
    del x, tx


def case_softmax(b: Bench) -> None:
    from ember.kernels.softmax import softmax
    import ember
    _rows_op(b, "softmax", lambda x: softmax(x), lambda t: b.torch.softmax(t, -1),
             lambda e: ember.activation.softmax(e, -1))


def case_layer_norm(b: Bench) -> None:
    from ember.kernels.norm import layer_norm
    torch = b.torch
    w = b.rt.to_device(np.random.default_rng(3).standard_normal(8192, np.float32))
    bias = b.rt.to_device(np.random.default_rng(4).standard_normal(8192, np.float32))
    tw, tbias = to_torch(b, w), to_torch(b, bias)
    import ember
    from ember.nn.norm import layer_norm as tensor_layer_norm
    ew, eb = (ember.tensor(x.numpy(), device=ember.Device.cuda(0)) for x in (w, bias))
    _rows_op(b, "layer_norm", lambda x: layer_norm(x, w, bias),
             lambda t: torch.nn.functional.layer_norm(t, (8192,), tw, tbias),
             lambda e: tensor_layer_norm(e, (8192,), ew, eb))


def case_tiny_ops(b: Bench) -> None:
    """Host time per op of a chain of 100 tiny adds ((256,) f32): eager launches, the same chain
    captured once as a CUDA graph and replayed, and torch eager and its own CUDA graph replay."""
    from ember.kernels.elementwise import binary
    torch = b.torch
    ops = 100
    x = b.rt.to_device(np.random.default_rng(5).standard_normal(256, np.float32))

    def chain():
        y = x
        for _ in range(ops):
            y = binary("add", y, x)
        return y

    tx = to_torch(b, x)

    def torch_chain():
        y = tx
        for _ in range(ops):
            y = torch.add(y, tx)
        return y

    graph = b.rt.capture(chain)
    graph.replay()
    err = rel_error(b, graph.result, torch_chain())
    torch_graph = torch.cuda.CUDAGraph()  # torch's own answer to launch overhead: the chain captured too
    torch.cuda.synchronize()
    with torch.cuda.graph(torch_graph):
        captured = torch_chain()
    torch_graph.replay()
    torch.cuda.synchronize()
    if not torch.equal(captured, torch_chain()):
        raise RuntimeError("tiny_ops: torch's CUDA graph replay differs from its eager chain")
    case = f"{ops} tiny adds (256,) f32, host time"
    for impl, fn, sync in (("ember eager launches", chain, b.rt.synchronize),
                           ("ember CUDA graph replay", graph.replay, b.rt.synchronize),
                           ("torch eager", torch_chain, torch.cuda.synchronize),
                           ("torch CUDA graph replay", torch_graph.replay, torch.cuda.synchronize)):
        times = []
        for _ in range(b.repeats * 3):
            sync()
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        sync()
        us = statistics.median(times) * 1e6 / ops
        b.rows.append(dict(case=case, impl=impl, ms=round(us * ops / 1e3, 4), rate=round(us, 2), unit="us/op",
                           **({"rel_error": f"{err:.1e}"} if impl == "ember CUDA graph replay" else {})))
        print(f"{case:34s} {impl:28s} {us:9.2f} us/op (host)", flush=True)
    graph.close()


def case_plan_replay(b: Bench) -> None:
    """Host time per op of bench/fusion.py's 100-op elementwise chain on a 4x4 f32 tensor through
    `Device.cuda(0)` (Fusion(Cube(cuda))): recording the ops, and the sync that runs the cached plan,
    with CUDA graphs on (the plan's graph replayed) and off (the plan's kernels launched), against torch
    eager doing the same 100 ops. Host time: perf_counter around the Python calls, the device idle at
    the start of each (synchronized before)."""
    import ember
    import ember.debug
    from ember.backend.cube.fused.cuda_graphs import replays_for
    from .fusion import OPS, chain
    torch = b.torch
    device = ember.Device.cuda(0)
    fusion = ember.debug.fusion_backend(device)
    if fusion is None:
        raise RuntimeError("Device.cuda(0) has no fusion layer (EMBER_FUSION=0)")
    replays = replays_for(fusion.inner)
    host = np.random.default_rng(6).standard_normal((4, 4)).astype(np.float32)
    want = chain(host.astype(np.float64))
    x = ember.tensor(host, device=device)
    case = f"replayed {OPS}-op plan, 4x4 f32, host time"
    modes = [("graphs on", True), ("graphs off", False)] if replays is not None else [("no graphs", False)]
    for label, enabled in modes:
        if replays is not None:
            replays.enabled = enabled
        before = dict(replays.counts) if replays is not None else {}
        record, flush, total = [], [], []
        for i in range(30 + b.repeats * 30):
            b.rt.synchronize()
            t0 = time.perf_counter()
            y = chain(x)
            t1 = time.perf_counter()
            fusion.flush()
            t2 = time.perf_counter()
            if i == 0:
                err = float(np.abs(y.numpy() - want).max() / np.abs(want).max())
            if i >= 30:  # after warm-up: the plan cached, its graph captured
                record.append((t1 - t0) / OPS * 1e6)
                flush.append((t2 - t1) / OPS * 1e6)
                total.append((t2 - t0) / OPS * 1e6)
            del y
        graphs = {k: replays.counts[k] - before[k] for k in before} if replays is not None else {}
        for impl, values in ((f"ember record + sync ({label})", total), (f"ember sync alone ({label})", flush),
                             (f"ember record alone ({label})", record)):
            us = statistics.median(values)
            b.rows.append(dict(case=case, impl=impl, ms=round(us * OPS / 1e3, 4), rate=round(us, 2), unit="us/op",
                               rel_error=f"{err:.1e}", **({"graphs": graphs} if "sync" in impl else {})))
            print(f"{case:34s} {impl:40s} {us:9.2f} us/op (host) {graphs}", flush=True)
    if replays is not None:
        replays.enabled = True
    tx = torch.from_numpy(host).cuda()
    times = []
    for i in range(30 + b.repeats * 30):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        chain(tx)
        times.append((time.perf_counter() - t0) / OPS * 1e6)
    us = statistics.median(times[30:])
    b.rows.append(dict(case=case, impl="torch eager", ms=round(us * OPS / 1e3, 4), rate=round(us, 2), unit="us/op"))
    print(f"{case:34s} {'torch eager':40s} {us:9.2f} us/op (host)", flush=True)


def _training(b: Bench, workload: str, args: list[str], timeout_s: float,
              impls: tuple = ("torch", "ember", "torch.compile"), env: dict | None = None) -> None:
    """Rows of `python -m bench.gpt workload impl args` for `impls`, each in its own process (its own peak
    memory) with `env` added to the environment, each stopped after `timeout_s` (a row then says so); then
    the case's ember rows get their ratios to its torch rows (`note_ratios`)."""
    import os
    import subprocess
    case = {"gpt": "GPT step (12 layers, d 768, 12 heads, seq 1024, batch 8, vocab 50304, tied head, AdamW, tf32)",
            "encoder": "transformer_encoder fwd+bwd (d 256, 4 heads, d_ff 1024, seq 128, batch 8, 2 layers, tf32)"}
    name = case[workload] if not args else f"{workload} {' '.join(args)} (otherwise as the full step)"
    for impl in impls:
        command = [sys.executable, "-m", "bench.gpt", workload, impl, *args]
        label = impl + "".join(f" {k}={v}" for k, v in (env or {}).items())
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                                  env={**os.environ, **(env or {})})
        except subprocess.TimeoutExpired as e:
            b.rows.append(dict(case=name, impl=label, ms=None, rate=None, unit="ms/step",
                               note=f"stopped after {timeout_s:.0f} s"))
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr or ""
            print(f"{name}: {label} stopped after {timeout_s:.0f} s; stderr tail: {err[-1500:]}", flush=True)
            continue
        line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        if done.returncode != 0 or not line.startswith("{"):
            b.rows.append(dict(case=name, impl=label, ms=None, rate=None, unit="ms/step", note="failed"))
            print(f"{name}: {label} failed (rc {done.returncode}): {done.stderr[-1500:]}", flush=True)
            continue
        row = json.loads(line)
        extra = {k: v for k, v in row.items() if k not in ("workload", "impl", "step_ms")}
        b.rows.append(dict(case=name, impl=label, ms=row["step_ms"], rate=round(1e3 / row["step_ms"], 3),
                           unit="steps/s", **extra))
        print(f"{name}: {label} {row['step_ms']} ms/step {extra}\n{done.stderr[-800:]}", flush=True)
    note_ratios(b.rows, name)


def note_ratios(rows: list[dict], case: str) -> None:
    """Add to each timed ember row of `case` its time over each timed torch row's (`vs_torch`,
    `vs_torch.compile`: >1 means ember is slower).

    Example:
        >>> rows = [dict(case="c", impl="ember", ms=6.0), dict(case="c", impl="torch", ms=3.0)]
        >>> note_ratios(rows, "c"); rows[0]["vs_torch"]
        2.0
    """
    timed = [r for r in rows if r["case"] == case and r["ms"]]
    for row in (r for r in timed if r["impl"].startswith("ember")):
        row.update({f"vs_{peer['impl']}": round(row["ms"] / peer["ms"], 3) for peer in timed
                    if peer["impl"].startswith("torch")})


def case_encoder(b: Bench) -> None:
    _training(b, "encoder", [], timeout_s=240)


def case_gpt(b: Bench) -> None:
    import os
    _training(b, "gpt", [], timeout_s=float(os.environ.get("BENCH_GPT_TIMEOUT_S", 300)))


def case_gpt_autocast(b: Bench) -> None:
    """The GPT step with forward and loss under bf16 autocast, ember's against torch's (eager, compiled)."""
    import os
    _training(b, "gpt", ["--autocast", "bf16"], timeout_s=float(os.environ.get("BENCH_GPT_TIMEOUT_S", 300)))


def case_gpt_reduced(b: Bench) -> None:
    """The GPT step at sizes ember fits in the H200's memory: 2 of the 12 layers at batch 8, and all 12
    layers at batch 1; ember also with CUDA graphs off (what graphs cost in memory and gain in time)."""
    for args in (["--layers", "2"], ["--batch", "1"]):
        _training(b, "gpt", args, timeout_s=150)
        _training(b, "gpt", args, timeout_s=150, impls=("ember",), env={"EMBER_CUDA_GRAPHS": "0"})


# Labels of rows that are not ember's own kernels though they do not name a framework first, as the
# report reads them (its columns are frameworks): the two copies are the bandwidth ceiling of a case.
REPORT_LABELS = {"device-to-device copy (ember)": "copy (ember)", "torch copy_": "copy (torch copy_)",
                 "cuBLAS via CuPy (ember stream)": "cuBLAS via CuPy"}


def report_rows(rows: list[dict], cases: list[str]) -> list[Row]:
    """bench.gpu's rows as the suite's (`harness.Row`), each under the case key that made it (`cases`, one
    per row): the time in microseconds, ember's cube kernels labelled "ember cube ...", and the rate and
    the row's other figures in the note (ratios to torch are left to the report).

    Example:
        >>> report_rows([dict(case="gelu f32 2^28", impl="torch gelu", ms=1.5, rate=1.43, unit="TB/s")], ["gelu"])
        [Row(bench='gelu', case='gelu f32 2^28', impl='torch gelu', median_us=1500.0, note='1.43 TB/s')]
    """
    def label(impl: str) -> str:
        return REPORT_LABELS.get(impl, "ember " + impl if impl.startswith("cube ") else impl)

    def note(row: dict) -> str:
        rate = [f"{row['rate']} {row['unit']}"] if row.get("rate") is not None else []
        extra = [f"{k}={v}" for k, v in row.items()
                 if k not in ("case", "impl", "ms", "rate", "unit", "note") and not k.startswith("vs_")]
        return ", ".join(rate + extra + ([row["note"]] if row.get("note") else []))
    return [Row(case, row["case"], label(row["impl"]), None if row["ms"] is None else row["ms"] * 1e3, note(row))
            for row, case in zip(rows, cases, strict=True)]


CASES = {"matmul": case_matmul, "tiny_ops": case_tiny_ops, "plan_replay": case_plan_replay, "gelu": case_gelu,
         "softmax": case_softmax, "layer_norm": case_layer_norm, "encoder": case_encoder, "gpt": case_gpt,
         "gpt_reduced": case_gpt_reduced, "gpt_autocast": case_gpt_autocast}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="*", help=f"cases to run (default: all of {list(CASES)})")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--results", help="write the rows here as `python -m bench --json` does, for --report")
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args(argv)
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; known: {list(CASES)}")
    bench = Bench(args.quick)
    failed, cases = [], []  # cases: the case key of each row
    for name in args.cases or CASES:
        try:
            CASES[name](bench)
        except Exception as e:  # one broken case must not hide the others' figures
            failed.append(name)
            print(f"{name}: FAILED {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        cases += [name] * (len(bench.rows) - len(cases))
    print("\n| case | implementation | ms | rate | notes |\n|---|---|---|---|---|")
    for r in bench.rows:
        notes = ", ".join(f"{k}={v}" for k, v in r.items() if k not in ("case", "impl", "ms", "rate", "unit"))
        print(f"| {r['case']} | {r['impl']} | {r['ms']} | {r['rate']} {r['unit']} | {notes} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(rows=bench.rows, failed=failed), f, indent=1)
    if args.results:
        torch = bench.torch
        write_json(args.results, report_rows(bench.rows, cases),
                   {"device": "Device.cuda(0)", "gpu": torch.cuda.get_device_name(0), "cuda": torch.version.cuda,
                    "repeats": bench.repeats, "failed": failed,
                    "command": shlex.join(["python", "-m", "bench.gpu", *(sys.argv[1:] if argv is None else argv)])})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
