"""`python -m bench.ddp [--steps 20] [--batch 64]`: the overhead of data-parallel training on this
machine's CPU, for the MNIST CNN of `ember.examples.mnist` (width 16) on Device.cpu().

It times a training step (forward, backward, SGD step; the host read of the loss ends each step) in
three runs, the same global batch in each: one process without DataParallel (the peer), one process
with `DataParallel` over a one-rank group (the hooks and buckets alone), and two ranks over MPI
(`ember launch --nproc 2`, per-rank batch halved, gradients all-reduced). It prints the median step
time of each and its ratio to the peer. On a 2-core machine the two ranks share the cores that the
one process's OpenMP kernels use, so the ratio is the cost of communication and of running two
interpreters, not a speed-up.

Example:
    python -m bench.ddp --steps 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np


def steps(batch: int, count: int, ddp: bool) -> list[float]:
    """Seconds of each of `count` steps (after 3 warm-up steps) on this rank's `batch` images."""
    import ember
    from ember.examples.mnist import ConvNet
    from ember.nn.loss import cross_entropy
    from ember.optim import SGD
    from ember.train import DataParallel
    ad = ember.Device.cpu().autodiff()
    ember.seed(0)
    model = ConvNet(16, device=ad)
    wrapped = DataParallel(model, ember.distributed.init()) if ddp else None
    opt = SGD(model, lr=0.01)
    rng = np.random.default_rng(ember.distributed.rank())
    x = ember.from_numpy(rng.normal(size=(batch, 1, 28, 28)).astype(np.float32), device=ad)
    y = ember.from_numpy(rng.integers(0, 10, batch), device=ad)
    times = []
    for _ in range(count + 3):
        started = time.perf_counter()
        loss = cross_entropy(model(x), y)
        grads = wrapped.backward(loss) if ddp else loss.backward()
        opt.step(grads)
        loss.item()
        times.append(time.perf_counter() - started)
    return times[3:]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64, help="the global batch")
    parser.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)  # one rank of the MPI run
    args = parser.parse_args(argv)
    if args.rank:
        import ember.distributed
        group = ember.distributed.init()
        times = steps(args.batch // group.size, args.steps, ddp=True)
        if group.rank == 0:
            print("RESULT " + json.dumps(times), flush=True)
        return
    rows = {"1 process, no DataParallel (peer)": steps(args.batch, args.steps, ddp=False),
            "1 process, DataParallel over 1 rank": steps(args.batch, args.steps, ddp=True)}
    out = subprocess.run([sys.executable, "-m", "ember.cli", "launch", "--nproc", "2", __file__, "--rank",
                          "--steps", str(args.steps), "--batch", str(args.batch)],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    found = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if not found:
        sys.exit(f"the 2-rank run failed:\n{out.stdout}\n{out.stderr}")
    rows["2 ranks over MPI, DataParallel"] = json.loads(found[0][7:])
    peer = statistics.median(rows["1 process, no DataParallel (peer)"])
    print(f"MNIST CNN, global batch {args.batch}, Device.cpu(), {os.cpu_count()} cores, median of {args.steps} steps")
    for name, times in rows.items():
        median = statistics.median(times)
        print(f"  {name:<40} {median * 1e3:8.1f} ms/step   x{median / peer:.2f}")


if __name__ == "__main__":
    main()
