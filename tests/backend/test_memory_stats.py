"""`device.memory_stats()` and `device.memory_cleanup()`: real numbers that follow tensor lifetimes.

Cube(cpu) tensors made by kernels live in the host memory pool, Cube(wgpu) tensors in the adapter's
pool of storage buffers; the NumPy device has no pool and says so.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import ember
from ember.cube.runtime.wgpu import wgpu_available
from ember.errors import DeviceError

POOLED = [pytest.param(ember.Device.cpu, id="cpu"),
          pytest.param(ember.Device.wgpu, id="wgpu", marks=pytest.mark.skipif(
              not wgpu_available()[0], reason=f"wgpu: {wgpu_available()[1]}"))]


@pytest.mark.parametrize("make", POOLED)
@pytest.mark.parametrize("rows", [1, 3, 300])
def test_in_use_rises_with_live_tensors_and_falls_when_they_die(make, rows):
    device = make()

    def compute():
        x = ember.tensor(np.random.default_rng(rows).standard_normal((rows, 1000)).astype(np.float32), device=device)
        return x, (x.exp() * 2.0).sum(dim=1), x.exp()  # kernels: the outputs come from the pool

    compute()  # the scalar 2.0 is cached per device: let it be made before counting
    gc.collect()
    device.sync()
    before = device.memory_stats()
    x, y, z = compute()
    want = np.exp(x.numpy())
    np.testing.assert_allclose(y.numpy(), 2 * want.sum(1), rtol=1e-5)
    during = device.memory_stats()
    assert during.in_use >= before.in_use + z.numpy().nbytes  # z at least (rounded up to the pool's sizes)
    assert during.peak_in_use >= during.in_use and during.reserved >= during.in_use
    assert during.peak_reserved >= during.reserved
    del x, y, z
    gc.collect()
    after = device.memory_stats()
    assert after.in_use <= before.in_use, "the tensors' memory did not go back to the pool"
    assert after.peak_in_use >= during.in_use
    released = device.memory_cleanup()
    assert released >= 0 and device.memory_stats().reserved == after.reserved - released
    assert device.memory_stats().in_use == after.in_use  # cleanup never touches live memory


@pytest.mark.parametrize("make", POOLED)
def test_reset_peaks_restarts_them_from_the_current_bytes(make):
    device = make()
    big = ember.ones(4096, 257, device=device) * 3.0  # 4 MiB, more than anything live after it dies
    device.sync()
    del big
    gc.collect()
    seen = device.memory_stats(reset_peaks=True)
    assert seen.peak_in_use >= 4096 * 257 * 4  # the call reports the old peaks
    now = device.memory_stats()
    assert now.peak_in_use == now.in_use and now.peak_reserved == now.reserved  # nothing ran since
    small = ember.ones(7, 5, device=device) * 2.0
    device.sync()
    later = device.memory_stats()
    assert now.in_use < later.peak_in_use < seen.peak_in_use, "the peak is not that of what ran since"
    del small


def test_autodiff_variants_share_the_pool_of_their_device():
    device = ember.Device.cpu()
    assert device.autodiff().memory_stats().reserved == device.memory_stats().reserved


def test_the_numpy_device_has_no_pool():
    with pytest.raises(DeviceError, match="no memory pool"):
        ember.Device.numpy().memory_stats()
    with pytest.raises(DeviceError, match="no memory pool"):
        ember.Device.numpy().memory_cleanup()


def test_a_matmul_product_is_counted():
    """GEMM products (BLAS on the CPU, or a tile kernel, whichever the autotuner picked) come from the pool."""
    device = ember.Device.cpu()
    rng = np.random.default_rng(0)
    a, b = (ember.tensor(rng.standard_normal(s, dtype=np.float32), device=device) for s in ((256, 128), (128, 320)))
    a @ b  # autotuned and compiled before counting
    gc.collect()
    device.sync()
    before = device.memory_stats().in_use
    c = a @ b
    device.sync()
    assert device.memory_stats().in_use - before >= 256 * 320 * 4
    np.testing.assert_allclose(c.numpy(), a.numpy() @ b.numpy(), rtol=1e-4, atol=1e-4)
