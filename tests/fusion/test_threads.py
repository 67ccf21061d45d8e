"""Threads sharing the fused device: the stream is locked, so every thread gets its own right results."""

from __future__ import annotations

import threading

import numpy as np

import ember


def test_threads_recording_on_one_device_get_their_own_results(cpu):
    rng = np.random.default_rng(0)
    hosts = [rng.standard_normal((32, 16)).astype(np.float32) for _ in range(4)]
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            x = ember.tensor(hosts[k], device=cpu)
            for _ in range(20):
                y = ((x * float(k + 1)).tanh() + 1.0).sum(dim=1)
            results[k] = y.numpy()
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for k, h in enumerate(hosts):
        np.testing.assert_allclose(results[k], (np.tanh(h * (k + 1)) + 1).sum(axis=1), rtol=1e-5)
