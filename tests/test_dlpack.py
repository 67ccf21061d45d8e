"""The DLPack structs ember builds and reads itself (`ember.api.dlpack`), the path of CUDA memory, checked
on host memory against torch: layout, dtypes, strides, zero copy, and who frees what when."""

import gc

import ml_dtypes
import numpy as np
import pytest
import torch

import ember
from ember.api import dlpack


class Handed:
    """Hands torch a capsule made here."""

    def __init__(self, capsule, device=(dlpack.KDL_CPU, 0)):
        self.capsule, self.device = capsule, device

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return self.device


DTYPES = [np.float64, np.float32, np.float16, ml_dtypes.bfloat16, np.int64, np.int32, np.int16, np.int8,
          np.uint8, np.bool_]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, view", [((3, 5), np.s_[:, ::2]), ((0, 4), np.s_[:]), ((), ()), ((2, 3, 4), np.s_[::-1])])
def test_exported_memory_reaches_torch_uncopied_and_is_released(dtype, shape, view):
    rng = np.random.default_rng(0)
    base = (rng.standard_normal(shape) * 4).astype(dtype)
    a = np.asarray(base[view])
    if any(s < 0 for s in a.strides):
        a = np.ascontiguousarray(a)  # DLPack's strides may be negative, torch's may not
    live = len(dlpack._LIVE)
    capsule = dlpack.managed_capsule(a.ctypes.data, a.shape, a.strides, a.dtype, (dlpack.KDL_CPU, 0), a)
    t = torch.from_dlpack(Handed(capsule))
    assert t.shape == a.shape and t.data_ptr() == a.ctypes.data or a.size == 0
    np.testing.assert_array_equal(t.float().numpy() if dtype is ml_dtypes.bfloat16 else t.numpy(), a)
    assert len(dlpack._LIVE) == live + 1
    del t, capsule
    gc.collect(1)  # the young generations: what this test made (a full pass costs seconds in a large suite)
    assert len(dlpack._LIVE) == live  # torch called the deleter
    unused = dlpack.managed_capsule(a.ctypes.data, a.shape, a.strides, a.dtype, (dlpack.KDL_CPU, 0), a)
    del unused
    gc.collect(1)  # the young generations: what this test made (a full pass costs seconds in a large suite)
    assert len(dlpack._LIVE) == live  # an unconsumed capsule frees its tensor itself


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.uint8])
def test_imported_capsules_read_like_numpy(dtype):
    t = (torch.arange(24) % 5).to(dtype).reshape(4, 6).T[1:]
    imported = dlpack.Imported(t.__dlpack__())
    assert imported.address == t.data_ptr() and imported.device == (dlpack.KDL_CPU, 0)
    assert imported.shape == tuple(t.shape) and imported.strides == tuple(s * t.element_size() for s in t.stride())
    storage = t.untyped_storage()
    memory = (np.ctypeslib.ctypes.c_char * storage.nbytes()).from_address(storage.data_ptr())
    start = np.frombuffer(memory, imported.dtype, offset=imported.address - storage.data_ptr())
    view = np.lib.stride_tricks.as_strided(start, imported.shape, imported.strides, writeable=False)
    np.testing.assert_array_equal(view.astype(np.float32), t.float().numpy())
    contiguous = dlpack.Imported(torch.ones(2, 3, dtype=dtype).__dlpack__())
    assert contiguous.strides == (3 * contiguous.dtype.itemsize, contiguous.dtype.itemsize)
    with pytest.raises(TypeError, match="unconsumed"):
        capsule = t.__dlpack__()
        dlpack.Imported(capsule)
        dlpack.Imported(capsule)


def test_cuda_tensors_share_device_memory_with_torch():
    from ember.cube.runtime.cuda import cuda_available
    if not (cuda_available()[0] and torch.cuda.is_available()):
        pytest.skip("needs an NVIDIA GPU with ember's cuda extra and a CUDA build of torch")
    t = torch.arange(12, dtype=torch.bfloat16, device="cuda").reshape(3, 4) * 2
    e = ember.from_dlpack(t)
    assert e.device == ember.Device.cuda(0) and e.dtype == ember.bf16
    back = torch.from_dlpack(e)
    assert back.data_ptr() == t.data_ptr() and torch.equal(back, t)
    y = torch.from_dlpack(e * 3)  # ember's queued work is finished before torch reads it
    assert torch.equal(y, t * 3)
