"""Memory saved by gradient checkpointing on a deep MLP: peak host memory of forward + backward with
`device.autodiff()` against `device.autodiff(checkpointing="balanced")`, and the time each takes.

Peak memory is measured with `tracemalloc`, which sees NumPy's buffers; one run each (the peak is the
figure of interest, and tracing slows the run), so no peers.
"""

from __future__ import annotations

import time
import tracemalloc

from .frameworks import Frameworks
from .harness import Row, Settings

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


def checkpointing(fw: Frameworks, settings: Settings) -> list[Row]:
    depth, width, batch = settings.size((24, 256, 256), (2, 8, 4))
    plain_mb, plain_us = _step(fw.device.autodiff(), depth, width, batch)
    ckpt_mb, ckpt_us = _step(fw.device.autodiff(checkpointing="balanced"), depth, width, batch)
    case = f"mlp {depth}x{width}, batch {batch}"
    return [
        Row(NAME, case, "ember", plain_us, f"no checkpointing; peak {plain_mb:.1f} MiB"),
        Row(NAME, case, "ember balanced", ckpt_us,
            f"checkpointing='balanced'; peak {ckpt_mb:.1f} MiB ({ckpt_mb / plain_mb:.0%} of plain)"),
    ]


BENCHMARKS = {NAME: checkpointing}
