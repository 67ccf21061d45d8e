"""cat, pad and slice_assign on a device's Cube backend run on the device (the strided assign kernel), not
through a host copy: against NumPy on random inputs, strided and empty ones included, with no fallback.
Runs on wgpu (lavapipe in CI) and, where one is here, on a CUDA GPU."""

from __future__ import annotations

import numpy as np
import pytest

from ember.backend.cube import CubeBackend
from ember.cube.runtime.arguments import DeviceArray
from ember.dtype import dtype_of
from ember.ops import registry
from ember.ops.primitive import Aval


def _runtimes() -> list:
    from ember.cube.runtime.cuda import cuda_available, cuda_runtime
    from ember.cube.runtime.nvrtc import nvrtc_available
    from ember.cube.runtime.wgpu import wgpu_available, wgpu_runtime
    found = []
    if wgpu_available()[0]:
        found.append(pytest.param(wgpu_runtime, id="wgpu"))
    if cuda_available()[0] and nvrtc_available()[0]:
        found.append(pytest.param(cuda_runtime, id="cuda"))
    return found or [pytest.param(None, marks=pytest.mark.skip(reason="no wgpu adapter and no CUDA GPU here"))]


@pytest.fixture(params=_runtimes())
def backend(request) -> CubeBackend:
    return CubeBackend(request.param())


def run(backend: CubeBackend, name: str, *arrays: np.ndarray, **params) -> np.ndarray:
    """`name` on the device (inputs as device views of the same layout), checked against its reference."""
    prim = registry[name]
    out = prim.infer(*(Aval(a.shape, dtype_of(a.dtype)) for a in arrays), **params)
    handles = [backend.from_host(np.ascontiguousarray(a)) for a in arrays]
    handles = [h if a.flags.c_contiguous else backend.from_host(np.ascontiguousarray(a.T)).T
               for h, a in zip(handles, arrays)]  # the transposed samples stay transposed views
    result = backend.execute(prim, handles, params, out)
    assert isinstance(result, DeviceArray) and name not in backend.fallbacks, f"{name} ran through the host"
    got = backend.to_host(result)
    np.testing.assert_array_equal(got, prim.reference(*arrays, **params))
    return got


def sample(rng, shape, dtype, transposed=False) -> np.ndarray:
    if transposed:
        return sample(rng, shape[::-1], dtype).T
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    return (rng.standard_normal(shape) * 10).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_cat_on_the_device(backend, dtype):
    rng = np.random.default_rng(0)
    a, b, c = sample(rng, (3, 4), dtype), sample(rng, (3, 0), dtype), sample(rng, (3, 2), dtype, transposed=True)
    run(backend, "cat", a, b, c, dim=1)
    run(backend, "cat", sample(rng, (2, 3, 5), dtype), sample(rng, (1, 3, 5), dtype), dim=0)
    run(backend, "cat", sample(rng, (0, 3), dtype), sample(rng, (0, 3), dtype), dim=0)  # empty output


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_pad_on_the_device(backend, dtype):
    rng = np.random.default_rng(1)
    run(backend, "pad", sample(rng, (3, 5), dtype), pads=((1, 0), (2, 3)), value=1)
    run(backend, "pad", sample(rng, (4, 2), dtype, transposed=True), pads=((0, 2), (1, 1)), value=0)
    run(backend, "pad", sample(rng, (0, 3), dtype), pads=((1, 1), (0, 0)), value=1)  # only the padding


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_slice_assign_on_the_device(backend, dtype):
    rng = np.random.default_rng(2)
    x = sample(rng, (5, 6), dtype)
    run(backend, "slice_assign", x, sample(rng, (3, 2), dtype), ranges=((0, 5, 2), (1, 3, 1)))
    run(backend, "slice_assign", x, sample(rng, (2, 5), dtype, transposed=True), ranges=((4, 0, -3), (5, 0, -1)))
    run(backend, "slice_assign", x, sample(rng, (0, 6), dtype), ranges=((2, 2, 1), (0, 6, 1)))  # empty slice
