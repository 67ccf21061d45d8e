"""Memory saved by gradient checkpointing on a deep MLP: peak host memory of forward + backward with
`device.autodiff()` against `device.autodiff(checkpointing="balanced")`, and the time each takes.

Peak memory is measured with `tracemalloc`, which sees NumPy's buffers.
"""

from __future__ import annotations

import time
import tracemalloc

from .harness import Row

NAME = "checkpointing"


def _step(device, depth: int, width: int, batch: int) -> tuple[float, float]:
    import ember
    from ember import activation as F
    ember.seed(0)
    weights = [(ember.randn(width, width, device=device) * (1 / width ** 0.5)).require_grad()
               for _ in range(depth)]
    x = ember.randn(batch, width, device=device)
    tracemalloc.start()
    tracemalloc.reset_peak()
    start = time.perf_counter()
    h = x
    for w in weights:
        h = F.gelu(h @ w) * 0.5 + h  # a residual block: matmul, then several cheap elementwise ops
    grads = h.square().mean().backward()
    elapsed = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(grads) == depth
    return peak / 2**20, elapsed * 1e6


def run(device: str, peers: list[str], depth: int = 24, width: int = 256, batch: int = 256) -> list[Row]:
    import ember
    base = ember.Device(device)
    plain_mb, plain_us = _step(base.autodiff(), depth, width, batch)
    ckpt_mb, ckpt_us = _step(base.autodiff(checkpointing="balanced"), depth, width, batch)
    case = f"mlp {depth}x{width}, batch {batch}"
    return [
        Row(NAME, case, "no checkpointing", plain_us, f"peak {plain_mb:.1f} MiB"),
        Row(NAME, case, "balanced", ckpt_us, f"peak {ckpt_mb:.1f} MiB ({ckpt_mb / plain_mb:.0%} of plain)"),
    ]
