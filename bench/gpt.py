"""GPU training-step workloads built alike in ember and torch: a GPT (GPT-2 small by default) and the
transformer encoder of `bench/training.py`, one run per process so each framework's peak memory is its own.

    python -m bench.gpt gpt ember|torch|torch.compile [--layers 12 --d-model 768 --heads 12 --seq 1024
                        --batch 8 --vocab 50257] [--steps 5] [--budget-s 120]
    python -m bench.gpt encoder ember|torch|torch.compile [--d-model 256 --heads 4 --d-ff 1024 ...]

GPT: token + learned position embeddings, `layers` pre-norm blocks (`TransformerEncoderLayer` with
`norm_first=True`, GELU, d_ff = 4 d_model, causal self-attention, no dropout), a final LayerNorm, an
untied linear head, cross entropy over the vocabulary, AdamW (lr 3e-4, weight decay 0.01). f32
parameters, TF32 matmuls in both frameworks (`EMBER_ALLOW_TF32=1`; torch's `allow_tf32`).
Encoder: `TransformerEncoder` forward, `square().mean()`, backward (no optimizer), as bench/training.py.

Prints one JSON line: the median step time (ms; a step ends with a device sync), the steps timed, the
first and last loss (a random-init GPT starts near ln(vocab)), and peak memory: ember's pool
(`device.memory_stats()`: peak in use, peak reserved) or torch's `max_memory_allocated` /
`max_memory_reserved`. The first two steps are warm-up (kernel compilation, autotuning, torch.compile);
steps are timed until `--steps` or `--budget-s` seconds, whichever comes first (at least one).

Example:
    >>> python -m bench.gpt gpt torch --steps 3
    {"workload": "gpt", "impl": "torch", "step_ms": 61.2, ...}
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


gpt_step_memory: list = []  # [list holding the bytes in use after the first step's forward pass]


def ember_workload(args):
    """(step function returning the loss as a float or None, device) for ember on `args.device`."""
    os.environ["EMBER_ALLOW_TF32"] = "1"
    import ember
    from ember.nn import (Embedding, LayerNorm, Linear, Module, TransformerEncoder, TransformerEncoderLayer)
    from ember.nn.loss import cross_entropy
    from ember.optim import AdamW
    base = ember.Device(args.device)
    device = base.autodiff()
    device.seed(0)
    rng = np.random.default_rng(0)
    if args.workload == "encoder":
        encoder = TransformerEncoder(args.d_model, args.heads, args.d_ff, num_layers=args.layers, dropout=0.0,
                                     device=device)
        x = ember.tensor(rng.standard_normal((args.batch, args.seq, args.d_model), dtype=np.float32), device=device)

        def encoder_step():
            loss = encoder(x).square().mean()
            loss.backward()
            base.sync()
            return None
        return encoder_step, base

    class GPT(Module):
        def __init__(self) -> None:
            d = args.d_model
            self.tok = Embedding(args.vocab, d, device=device)
            self.pos = Embedding(args.seq, d, device=device)
            self.blocks = [TransformerEncoderLayer(d, args.heads, 4 * d, dropout=0.0, activation="gelu",
                                                   norm_first=True, device=device) for _ in range(args.layers)]
            self.norm = LayerNorm(d, device=device)
            self.head = Linear(d, args.vocab, bias=False, device=device)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(ember.arange(idx.shape[1], device=device))
            for block in self.blocks:
                x = block(x, is_causal=True)
            return self.head(self.norm(x))

    model = GPT()
    optimizer = AdamW(model, lr=3e-4, weight_decay=0.01)
    idx = ember.tensor(rng.integers(0, args.vocab, (args.batch, args.seq)), device=device)
    target = ember.tensor(rng.integers(0, args.vocab, (args.batch * args.seq,)), device=device)

    forward_in_use: list = []
    gpt_step_memory[:] = [forward_in_use]

    def gpt_step():
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
    import torch
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(0)
    nn = torch.nn
    rng = np.random.default_rng(0)
    dev = "cuda" if args.device.startswith("cuda") else "cpu"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    if args.workload == "encoder":
        layer = nn.TransformerEncoderLayer(args.d_model, args.heads, args.d_ff, dropout=0.0, batch_first=True,
                                           device=dev)
        encoder = nn.TransformerEncoder(layer, args.layers, enable_nested_tensor=False)
        forward = torch.compile(encoder) if compiled else encoder
        x = torch.from_numpy(rng.standard_normal((args.batch, args.seq, args.d_model), dtype=np.float32)).to(dev)

        def encoder_step():
            encoder.zero_grad(set_to_none=True)
            forward(x).square().mean().backward()
            sync()
            return None
        return encoder_step

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d = args.d_model
            self.tok = nn.Embedding(args.vocab, d)
            self.pos = nn.Embedding(args.seq, d)
            self.blocks = nn.ModuleList(nn.TransformerEncoderLayer(d, args.heads, 4 * d, dropout=0.0,
                                                                   activation="gelu", batch_first=True,
                                                                   norm_first=True) for _ in range(args.layers))
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, args.vocab, bias=False)
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(args.seq))

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x, src_mask=self.mask, is_causal=True)
            return self.head(self.norm(x))

    model = GPT().to(dev)
    forward = torch.compile(model) if compiled else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    idx = torch.from_numpy(rng.integers(0, args.vocab, (args.batch, args.seq))).to(dev)
    target = torch.from_numpy(rng.integers(0, args.vocab, (args.batch * args.seq,))).to(dev)

    forward_in_use: list = []
    gpt_step_memory[:] = [forward_in_use]

    def gpt_step():
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(forward(idx).reshape(-1, args.vocab), target)
        if not forward_in_use and dev == "cuda":  # the first step only: what the forward pass holds
            torch.cuda.synchronize()
            forward_in_use.append(torch.cuda.memory_allocated())
        loss.backward()
        optimizer.step()
        sync()
        return float(loss.item())
    return gpt_step


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
    row = dict(workload=args.workload, impl=args.impl, step_ms=round(statistics.median(times) * 1e3, 2),
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
        from ember.backend.fusion.graphs import replays_for
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
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--steps", type=int, default=5)
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
