"""Threads: concurrent forward+backward passes give exactly what they give alone, and random streams
drawn from several threads never overlap while their union stays reproducible from the seed."""

from __future__ import annotations

import threading

import numpy as np

import ember
from conformance.oracle import sample

THREADS = 4


def _run_parallel(fn, count=THREADS):
    """Run fn(i) in `count` threads released together; return results by i (re-raising any error)."""
    barrier = threading.Barrier(count)
    results, errors = [None] * count, []

    def work(i):
        try:
            barrier.wait()
            results[i] = fn(i)
        except BaseException as e:  # noqa: BLE001  (re-raised in the main thread)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def _train_step(weights, x, device, no_grad_part: bool):
    params = [ember.tensor(w, device=device).require_grad() for w in weights]
    h = ember.tensor(x, device=device)
    for i, w in enumerate(params):
        h = (h @ w).tanh() if i % 2 else ember.activation.gelu(h @ w)
        if no_grad_part:
            with ember.no_grad():  # per-thread grad mode must not leak into the other threads
                _ = (h * 2).sum()
    loss = (h * h).mean()
    grads = loss.backward()
    return loss.item(), [p.grad(grads).numpy().copy() for p in params]


def test_concurrent_backward_matches_alone(device):
    rng = np.random.default_rng(1)
    problems = [([sample((8, 8), "f64", rng, -0.5, 0.5) for _ in range(6)], sample((5, 8), "f64", rng))
                for _ in range(THREADS)]
    devices = [device.autodiff(), device.autodiff(checkpointing="balanced")] * 2
    # Each thread alone runs the very program it runs together with the others: on a fusing device the
    # no-grad side computation changes which kernels run (and so the last bits of the results).
    alone = [_train_step(w, x, devices[i], no_grad_part=i % 2 == 0) for i, (w, x) in enumerate(problems)]
    for _ in range(3):
        together = _run_parallel(lambda i: _train_step(*problems[i], devices[i], no_grad_part=i % 2 == 0))
        for (loss, grads), (loss0, grads0) in zip(together, alone):
            assert loss == loss0
            for g, g0 in zip(grads, grads0):
                np.testing.assert_array_equal(g, g0)


def test_random_streams_from_threads_never_overlap(device):
    draws_per_thread, size = 25, 40

    def draw(_):
        return [ember.rand(size, dtype="f64", device=device).numpy().copy() for _ in range(draws_per_thread)]

    unions = []
    for _ in range(2):
        ember.seed(2024)
        per_thread = _run_parallel(draw)
        values = np.concatenate([v for thread in per_thread for v in thread])
        assert values.size == THREADS * draws_per_thread * size
        assert np.unique(values).size == values.size  # no block was handed out twice
        unions.append(np.sort(values))
    np.testing.assert_array_equal(unions[0], unions[1])  # the union depends only on the seed
    ember.seed(2024)
    serial = np.sort(np.concatenate([ember.rand(size, dtype="f64", device=device).numpy()
                                     for _ in range(THREADS * draws_per_thread)]))
    np.testing.assert_array_equal(unions[0], serial)
    ember.seed(2025)
    other = np.concatenate([v for t in _run_parallel(draw) for v in t])
    assert not np.isin(other, unions[0]).any()
