"""GPU training-step workloads built alike in ember and torch: a GPT (GPT-2 small by default) and the
transformer encoder of `bench/training.py`, one run per process so each framework's peak memory is its own.

    python -m bench.gpt gpt ember|torch|torch.compile [--layers 12 --d-model 768 --heads 12 --seq 1024
                        --batch 8 --vocab 50304] [--autocast bf16|f16] [--steps 5] [--budget-s 120]
    python -m bench.gpt encoder ember|torch|torch.compile [--d-model 256 --heads 4 --d-ff 1024 ...]

GPT (`models.ember_gpt`; its torch peer `torch_models.GPT`): token + learned position embeddings, `layers`
pre-norm causal blocks (GELU, d_ff = 4 d_model, no dropout), a final LayerNorm, the head tied to the
token embedding, cross entropy over the vocabulary (GPT-2's 50257 padded to 50304, a multiple of 64, on
both sides; the ids stay below 50257), AdamW (lr 3e-4, weight decay 0.01). f32 parameters, TF32 matmuls
on CUDA in both frameworks (`EMBER_ALLOW_TF32=1`; torch's `allow_tf32`), no autocast on either side
unless `--autocast bf16|f16`: then forward and loss run under `ember.autocast(device, dtype)` and
`torch.autocast(device_type, dtype)` (f32 master parameters and f32 gradients on both sides, no loss
scaling).
Encoder: `TransformerEncoder` (`models.ember_encoder`; peer `torch_models.Encoder`) forward,
`square().mean()`, backward (no optimizer), as bench/training.py.

The torch peer is what a torch user writes for speed: attention through
`F.scaled_dot_product_attention(..., is_causal=True)` (no mask, so CUDA runs its fused kernel), fused
AdamW (`models.torch_adamw`), `zero_grad(set_to_none=True)`; `torch.compile` wraps the model for the
third row. Both frameworks read the loss on the host once per step (`loss.item()`) and end the step
with a device sync.

Prints one JSON line: the median step time (ms; a step ends with a device sync), the steps timed, the
first and last loss (a random-init GPT starts near ln(vocab)), and peak memory: ember's pool
(`device.memory_stats()`: peak in use, peak reserved) or torch's `max_memory_allocated` /
`max_memory_reserved`. The first two steps are warm-up (kernel compilation, autotuning, torch.compile);
steps are timed until `--steps` or `--budget-s` seconds, whichever comes first (at least one).

Example:
    >>> python -m bench.gpt gpt torch --steps 3
    {"workload": "gpt", "impl": "torch", "step_ms": ..., "steps": 3, ...}
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np

from . import models

GPT2_TOKENS = 50257  # GPT-2's vocabulary; the model's is padded to 50304, a multiple of 64
LR, WEIGHT_DECAY = 3e-4, 0.01  # the GPT's AdamW, in both frameworks
gpt_step_memory: list = []  # [list holding the bytes in use after the first step's forward pass]


def ember_workload(args):
    """(step function returning the loss as a float or None, device) for ember on `args.device`."""
    os.environ["EMBER_ALLOW_TF32"] = "1"
    import ember
    from ember.nn.loss import cross_entropy
    from ember.optim import AdamW
    base = ember.Device(args.device)
    device = base.autodiff()
    device.seed(0)
    rng = np.random.default_rng(0)
    if args.workload == "encoder":
        encoder = models.ember_encoder(args.d_model, args.heads, args.d_ff, args.layers, device)
        x = ember.tensor(rng.standard_normal((args.batch, args.seq, args.d_model), dtype=np.float32), device=device)

        def encoder_step():
            loss = encoder(x).square().mean()
            loss.backward()
            base.sync()
            return None
        return encoder_step, base

    model = models.ember_gpt(args.vocab, args.seq, args.d_model, args.heads, args.layers, device)
    optimizer = AdamW(model, lr=LR, weight_decay=WEIGHT_DECAY)
    idx, target = (ember.tensor(a, device=device) for a in tokens(args, rng))

    forward_in_use: list = []
    gpt_step_memory[:] = [forward_in_use]

    def gpt_step():
        with ember.autocast(base, dtype=args.autocast or "bf16", enabled=args.autocast is not None):
            loss = cross_entropy(model(idx).reshape(-1, args.vocab), target)
        if not forward_in_use:  # the first step only: what the forward pass holds for backward
            base.sync()
            forward_in_use.append(base.memory_stats().in_use)
            print(f"after the forward pass: {forward_in_use[0] / 2**20:.0f} MiB in use", file=sys.stderr, flush=True)
        optimizer.step(loss.backward())
        base.sync()
        return float(loss.item())  # not the tensor: a loss kept alive could keep its step's tape
    return gpt_step, base


def torch_workload(args, compiled: bool):
    """The step function for torch (eager, or the model under `torch.compile`) on cuda or the CPU."""
    import torch
    from . import torch_models
    torch.backends.cuda.matmul.allow_tf32 = True  # ember's EMBER_ALLOW_TF32; both CUDA-only
    torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    dev = "cuda" if args.device.startswith("cuda") else "cpu"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    if args.workload == "encoder":
        encoder = torch_models.Encoder(args.d_model, args.heads, args.d_ff, args.layers).to(dev)
        forward = torch.compile(encoder) if compiled else encoder
        x = torch.from_numpy(rng.standard_normal((args.batch, args.seq, args.d_model), dtype=np.float32)).to(dev)
        fused_attention_only(torch, encoder, x)

        def encoder_step():
            encoder.zero_grad(set_to_none=True)
            forward(x).square().mean().backward()
            sync()
            return None
        return encoder_step

    model = torch_models.GPT(args.vocab, args.seq, args.d_model, args.heads, args.layers).to(dev)
    forward = torch.compile(model) if compiled else model
    optimizer = models.torch_adamw(torch, model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    idx, target = (torch.from_numpy(a).to(dev) for a in tokens(args, rng))
    fused_attention_only(torch, model, idx)

    forward_in_use: list = []
    gpt_step_memory[:] = [forward_in_use]

    def gpt_step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(dev, dtype=getattr(torch, {"bf16": "bfloat16", "f16": "float16"}[args.autocast or "bf16"]),
                            enabled=args.autocast is not None):
            loss = torch.nn.functional.cross_entropy(forward(idx).reshape(-1, args.vocab), target)
        if not forward_in_use and dev == "cuda":  # the first step only: what the forward pass holds
            torch.cuda.synchronize()
            forward_in_use.append(torch.cuda.memory_allocated())
        loss.backward()
        optimizer.step()
        sync()
        return float(loss.item())
    return gpt_step


def fused_attention_only(torch, model, *inputs) -> None:
    """Check that the peer's attention runs in torch's fused SDPA kernels (`torch_models.check_fused_attention`:
    an error, not a slowed row, where it would not), outside the peaks the row reports."""
    from .torch_models import check_fused_attention
    check_fused_attention(model, *inputs)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def tokens(args, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The GPT's input ids (batch, seq) and targets (batch * seq,), drawn below GPT-2's 50257 tokens (the
    padded vocabulary's extra rows are never a token, as in nanoGPT)."""
    real = min(args.vocab, GPT2_TOKENS)
    return rng.integers(0, real, (args.batch, args.seq)), rng.integers(0, real, (args.batch * args.seq,))


def measure(args) -> dict:
    """Build the workload, warm up, time steps; the JSON row (see the module docstring)."""
    start = time.perf_counter()
    if args.impl == "ember":
        step, device = ember_workload(args)
    else:
        step = torch_workload(args, compiled=args.impl == "torch.compile")
    build_s = time.perf_counter() - start
    losses, times = [], []
    warm = time.perf_counter()
    for i in range(2):
        loss = step()
        losses.append(loss)
        print(f"warm-up step {i}: {time.perf_counter() - warm:.1f} s since the first", file=sys.stderr, flush=True)
    warm_s = time.perf_counter() - warm
    deadline = time.perf_counter() + args.budget_s
    while len(times) < args.steps and (not times or time.perf_counter() + times[-1] < deadline):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
        print(f"step {len(times)}: {times[-1] * 1e3:.1f} ms", file=sys.stderr, flush=True)
        if loss is not None:
            losses.append(loss)
    row = dict(workload=args.workload, impl=args.impl, autocast=args.autocast, step_ms=round(statistics.median(times) * 1e3, 2),
               steps=len(times), build_s=round(build_s, 1), warmup_s=round(warm_s, 1),
               first_loss=losses[0], last_loss=losses[-1])
    if args.workload == "gpt":
        row["ln_vocab"] = round(math.log(args.vocab), 3)
        if gpt_step_memory and gpt_step_memory[0]:
            row["after_forward_in_use_MiB"] = round(gpt_step_memory[0][0] / 2**20, 1)
    if args.impl == "ember":
        st = device.memory_stats()
        row.update(peak_in_use_MiB=round(st.peak_in_use / 2**20, 1), peak_reserved_MiB=round(st.peak_reserved / 2**20, 1))
        import ember.debug
        from ember.backend.cube.fused.cuda_graphs import replays_for
        fusion = ember.debug.fusion_backend(device)
        replays = replays_for(fusion.inner) if fusion is not None else None
        if fusion is not None:
            row["fusion"] = {k: v for k, v in fusion.stats().items() if k in ("kernels", "inner_ops", "fallbacks",
                                                                              "plan_hits", "plan_misses")}
        if replays is not None:
            row["graphs"] = replays.stats()
    else:
        import torch
        if not torch.cuda.is_available():
            return row
        row.update(peak_in_use_MiB=round(torch.cuda.max_memory_allocated() / 2**20, 1),
                   peak_reserved_MiB=round(torch.cuda.max_memory_reserved() / 2**20, 1))
    return row


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.gpt", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload", choices=("gpt", "encoder"))
    parser.add_argument("impl", choices=("ember", "torch", "torch.compile"))
    parser.add_argument("--layers", type=int)
    parser.add_argument("--d-model", type=int)
    parser.add_argument("--heads", type=int)
    parser.add_argument("--d-ff", type=int, default=1024, help="encoder only (GPT: 4 d_model)")
    parser.add_argument("--seq", type=int)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=50304, help="GPT-2's 50257 padded to a multiple of 64")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--autocast", choices=("bf16", "f16"), help="gpt only: forward and loss under autocast")
    parser.add_argument("--budget-s", type=float, default=120.0, help="seconds of timed steps at most")
    parser.add_argument("--device", default="cuda:0", help="the device (torch: cuda when this is a cuda device, else cpu)")
    args = parser.parse_args(argv)
    defaults = dict(gpt=dict(layers=12, d_model=768, heads=12, seq=1024),
                    encoder=dict(layers=2, d_model=256, heads=4, seq=128))[args.workload]
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    return args


def main(argv: list[str] | None = None) -> int:
    print(json.dumps(measure(parse(argv))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
