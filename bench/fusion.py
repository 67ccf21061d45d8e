"""The fusion layer's host costs: a 100-op elementwise chain on a tiny (4x4) tensor, recorded and run.

- the whole chain and its sync, against NumPy, torch (eager, and under `torch.compile`, one fused kernel)
  and tinygrad doing the same 100 ops;
- `ember record/op`: the dispatch cost of one recorded op (the chain's recording time / 100);
- `ember replay`: the host time of the sync point that replays the chain's cached plan (key lookup,
  one fused kernel launch, handles filled in).

The last two exist only on a device with a fusion layer (`Device.cpu()`); elsewhere they say why not.

`fusion_on_off`: the MLP training step of `mlp_train_step` on the device under test with its fusion
layer on (`ember`) and switched off with `ember.debug.set_fusion` (`ember unfused`), in one run.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from . import models
from .frameworks import Frameworks, tensor_op
from .harness import Row, Settings
from .training import _batch

OPS = 100


def chain(x):
    """OPS elementwise ops: alternately multiply and add a constant."""
    for i in range(OPS // 2):
        x = x * 1.0001
        x = x + 0.0001
    return x


def _host_rows(fw: Frameworks, host: np.ndarray, settings: Settings) -> list[Row]:
    import ember
    import ember.debug
    bench, case = "fusion_replay", f"{OPS} elementwise ops, 4x4 f32"
    backend = ember.debug.fusion_backend(fw.device)
    if backend is None:
        why = f"skipped: {fw.device!r} has no fusion layer"
        return [Row(bench, case, "ember record/op", None, why), Row(bench, case, "ember replay", None, why)]
    x = ember.tensor(host, device=fw.device)
    record, replay = [], []
    for _ in range(3 if settings.tiny else 200):
        start = time.perf_counter()
        y = chain(x)
        middle = time.perf_counter()
        backend.flush()
        record.append((middle - start) / OPS * 1e6)
        replay.append((time.perf_counter() - middle) * 1e6)
        del y
    return [Row(bench, case, "ember record/op", statistics.median(record), "per recorded op"),
            Row(bench, case, "ember replay", statistics.median(replay), "host time of the replayed plan's sync")]


def fusion_replay(fw: Frameworks, settings: Settings) -> list[Row]:
    host = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
    rows = fw.compare_op("fusion_replay", f"{OPS} elementwise ops, 4x4 f32", tensor_op(chain, chain, compiled=True),
                         [host], settings)
    return rows + _host_rows(fw, host, settings)


def fusion_on_off(fw: Frameworks, settings: Settings) -> list[Row]:
    import ember
    import ember.debug
    sizes = settings.size((784, 512, 512, 10), (12, 8, 8, 10))
    batch = settings.size(128, 4)
    x, y = _batch(settings, (batch, sizes[0]), sizes[-1])
    backend = ember.debug.fusion_backend(fw.device)

    def setup(fused: bool):
        def build():
            device = fw.device.autodiff()
            step = models.ember_step(models.ember_mlp(sizes, device), ember.tensor(x, device=device),
                                     ember.tensor(y, device=device))

            def run() -> None:
                if backend is None:  # a device without fusion: the plain step
                    step()
                    return
                previous = ember.debug.set_fusion(fw.device, fused)
                try:
                    step()
                    fw.device.sync()
                finally:
                    ember.debug.set_fusion(fw.device, previous)
            return run
        return build

    unfused = setup(False) if backend is not None else f"{fw.device!r} has no fusion layer"
    case = f"MLP {'-'.join(map(str, sizes))}, batch {batch}, AdamW: fusion on / off"
    return fw.compare("fusion_on_off", case, {"ember": setup(True), "ember unfused": unfused}, settings)


BENCHMARKS = {"fusion_replay": fusion_replay, "fusion_on_off": fusion_on_off}
