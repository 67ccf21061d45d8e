"""Fused attention (ember/nn/fused_attention.py) against the composed path and torch's SDPA, on one device.

    python -m bench.attention [--device cuda:0|cpu] [--batch 8 --heads 12 --seq 1024 --dim 64] [--full]
                              [--repeat 5] [--rows 32,64,128]

Rows (medians of `--repeat` timed runs after one warm-up, each ending with a device sync):
- ember fused forward, and forward + backward (q, k, v require grad; backward of sum(out * cot));
- ember composed (`attention_weights(...) @ v`, the path masks and dropout take), forward + backward;
- torch `F.scaled_dot_product_attention` forward, and forward + backward (flash attention on a GPU);
- on a cube device, each cube kernel alone (forward, dQ, dK+dV) for each `--rows` (units per cube).
Causal by default (GPT's self-attention); f32 operands (B, H, L, D).

Example:
    >>> python -m bench.attention --device cpu --batch 2 --heads 4 --seq 256 --dim 32
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def timed(fn, sync, repeat: int) -> float:
    """Median milliseconds of `fn()` followed by `sync()`, after one warm-up call."""
    fn()
    sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.attention", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--full", action="store_true", help="no causal mask")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rows", default="32,64,128", help="units per cube to time the kernels with")
    args = parser.parse_args(argv)

    import torch
    import torch.nn.functional as TF

    import ember
    from ember.kernels import attention as kernels
    from ember.nn.attention import attention_weights, causal_mask
    from ember.nn.fused_attention import attention

    causal = not args.full
    shape = (args.batch, args.heads, args.seq, args.dim)
    rng = np.random.default_rng(0)
    q, k, v, cot = (rng.standard_normal(shape).astype(np.float32) for _ in range(4))
    base = ember.Device(args.device)
    tracked = base.autodiff()
    print(f"attention {shape} f32, {'causal' if causal else 'full'}, on {base!r}")

    def ember_run(fused: bool, backward: bool):
        dev = tracked if backward else base
        ts = [ember.tensor(x, device=dev) for x in (q, k, v)]
        if backward:
            ts = [t.require_grad() for t in ts]
        c = ember.tensor(cot, device=base)

        def run():
            if fused:
                out = attention(*ts, causal=causal)[0]
            else:
                blocked = causal_mask(args.seq, args.seq, 0, base) if causal else None
                out = attention_weights(ts[0], ts[1], blocked) @ ts[2]
            if backward:
                grads = (out * c).sum().backward()
                for t in ts:
                    t.grad(grads)[..., :1].numpy()  # forces the gradients without timing their download
            else:
                out[..., :1].numpy()
        return run

    for label, fused, backward in (("ember fused forward", True, False), ("ember fused forward+backward", True, True),
                                   ("ember composed forward+backward", False, True)):
        print(f"{label:40s} {timed(ember_run(fused, backward), base.sync, args.repeat):10.2f} ms", flush=True)

    dev = "cuda" if args.device.startswith("cuda") else "cpu"
    tq, tk, tv, tc = (torch.from_numpy(x).to(dev) for x in (q, k, v, cot))
    tsync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)

    def torch_run(backward: bool):
        ins = [t.clone().requires_grad_(backward) for t in (tq, tk, tv)]

        def run():
            out = TF.scaled_dot_product_attention(*ins, is_causal=causal)
            if backward:
                (out * tc).sum().backward()
        return run

    want = TF.scaled_dot_product_attention(tq, tk, tv, is_causal=causal).cpu().numpy()
    got = attention(*(ember.tensor(x, device=base) for x in (q, k, v)), causal=causal)[0].numpy()
    print(f"fused output vs torch: max abs error {np.abs(got - want).max():.2e}", flush=True)
    for label, backward in (("torch sdpa forward", False), ("torch sdpa forward+backward", True)):
        print(f"{label:40s} {timed(torch_run(backward), tsync, args.repeat):10.2f} ms", flush=True)

    flat = [np.ascontiguousarray(x.reshape(-1, args.seq, args.dim)) for x in (q, k, v)]
    if dev == "cuda":
        from ember.cube.runtime.cuda import cuda_runtime
        runtime = cuda_runtime(int(args.device.partition(":")[2] or 0))
        arrays, ksync = [runtime.to_device(x) for x in flat], runtime.synchronize
    else:
        arrays, ksync = flat, (lambda: None)
    scale = 1.0 / np.sqrt(args.dim)
    params = dict(scale=scale, causal=causal, offset=0)
    for rows in (int(r) for r in args.rows.split(",")):
        out = kernels.attention_forward(*arrays, **params, rows=rows)
        for name, fn in (("forward", lambda: kernels.attention_forward(*arrays, **params, rows=rows)),
                         ("dQ", lambda: kernels.attention_grad_q(*arrays, out, out, **params, rows=rows)),
                         ("dK+dV", lambda: kernels.attention_grad_kv(*arrays, out, out, **params, rows=rows))):
            print(f"{'kernel ' + name + f' rows={rows}':40s} {timed(fn, ksync, args.repeat):10.2f} ms", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
