"""The cross-entropy kernel reads logit rows in place at their row step (a large cuBLAS product's output
has rows padded to 16 bytes) on the GPU targets, and copies other layouts."""

from __future__ import annotations

import numpy as np
import pytest

from ember.kernels.common import unit_rows
from ember.kernels.cross_entropy import cross_entropy
from ember.cube.runtime.arguments import DeviceArray


def gpu_runtime(name: str):
    if name == "wgpu":
        from ember.cube.runtime.wgpu import wgpu_available, wgpu_runtime
        ok, why = wgpu_available()
        return wgpu_runtime() if ok else pytest.skip(why)
    from ember.cube.runtime.cuda import cuda_available, cuda_runtime
    ok, why = cuda_available()
    return cuda_runtime() if ok else pytest.skip(why)


def reference(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    top = x.max(1)
    lse = top + np.log(np.exp(x - top[:, None]).sum(1))
    return np.stack([lse - x[np.arange(len(y)), y], lse], 1)


@pytest.mark.parametrize("gpu", ["wgpu", "cuda"])
def test_rows_padded_wider_are_read_in_place(gpu):
    rt = gpu_runtime(gpu)
    rng = np.random.default_rng(0)
    y = rng.integers(0, 300, 7).astype(np.int32)
    wide = rng.standard_normal((7, 304)).astype(np.float32)
    wide[:, 300:] = 1e30  # the padding after each row: a read of it would swamp the row's logsumexp
    device = rt.to_device(wide)
    rows = device.strided((7, 300), device.strides)
    assert unit_rows(rows) == (rows, 304)
    np.testing.assert_allclose(cross_entropy(rows, rt.to_device(y)).numpy(), reference(wide[:, :300], y), rtol=1e-5)
    wide[:, 300:] = rng.standard_normal((7, 4))
    wide[:, :4] = 1e30  # now before each row: rows that start 4 elements in
    device = rt.to_device(wide)
    shifted = device.strided((7, 300), device.strides, device.offset + 4 * 4)
    np.testing.assert_allclose(cross_entropy(shifted, rt.to_device(y)).numpy(), reference(wide[:, 4:], y), rtol=1e-5)


def test_other_layouts_are_copied_to_rows():
    host = np.ones((3, 8), np.float32)
    assert unit_rows(host) == (host, 8)
    x, step = unit_rows(host.T)
    assert x.flags.c_contiguous and step == 3

    class Copied(DeviceArray):
        def copy(self):
            return DeviceArray(None, self.shape, self.dtype)
    columns = Copied(None, (8, 3), np.float32).T  # a transposed device view: its rows are not unit-stride
    x, step = unit_rows(columns)
    assert x is not columns and x.flags.c_contiguous and step == 8
