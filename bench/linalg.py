"""ember.linalg against torch.linalg (and NumPy) in the same run: solve (16 right-hand sides), cholesky, qr,
svd and eigh of one (512, 512) f32 matrix, and of one (2048, 2048) with --large. ember's factorizations
are blocked cube kernels whose updates are matmuls (the CPU's BLAS where the autotuner picks it), torch's
and NumPy's are LAPACK's. Threads are the process's: `OMP_NUM_THREADS=1 python -m bench linalg --device
cpu --peers torch,numpy --large` compares one thread each, without it all threads (docs/linalg.md)."""

from __future__ import annotations

import numpy as np

from .frameworks import Frameworks
from .harness import Row, Settings

OPS = ("solve", "cholesky", "qr", "svd", "eigh")


def _inputs(n: int):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    spd = (a @ a.T / n + np.eye(n)).astype(np.float32)
    return a, spd, rng.standard_normal((n, 16)).astype(np.float32)


def _ops(fw: Frameworks, name: str) -> dict:
    import ember.linalg as el
    tl = fw.modules["torch"].linalg if "torch" in fw.modules else None
    np_ops = {"solve": lambda a, s, b: np.linalg.solve(a, b), "cholesky": lambda a, s, b: np.linalg.cholesky(s),
              "qr": lambda a, s, b: np.linalg.qr(a), "svd": lambda a, s, b: np.linalg.svd(a),
              "eigh": lambda a, s, b: np.linalg.eigh(s)}
    ember_ops = {"solve": lambda a, s, b: el.solve(a, b), "cholesky": lambda a, s, b: el.cholesky(s),
                 "qr": lambda a, s, b: el.qr(a)[1], "svd": lambda a, s, b: el.svd(a)[1],
                 "eigh": lambda a, s, b: el.eigh(s)[0]}
    ops = {"numpy": np_ops[name], "ember": ember_ops[name]}
    if tl is not None:
        ops["torch"] = {"solve": lambda a, s, b: tl.solve(a, b), "cholesky": lambda a, s, b: tl.cholesky(s),
                        "qr": lambda a, s, b: tl.qr(a)[1], "svd": lambda a, s, b: tl.svd(a)[1],
                        "eigh": lambda a, s, b: tl.eigh(s)[0]}[name]
    return ops


def linalg(fw: Frameworks, settings: Settings) -> list[Row]:
    rows = []
    for n in [settings.size(512, 16)] + ([2048] if settings.large else []):
        hosts = _inputs(n)
        for name in OPS:
            rows += fw.compare_op("linalg", f"{name} ({n}, {n}) f32", _ops(fw, name), list(hosts), settings)
    return rows


BENCHMARKS = {"linalg": linalg}
