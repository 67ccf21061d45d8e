"""Creation and host interop (ember/api/creation.py, Tensor's host methods) against PyTorch and NumPy:
constructors, dtype inference, random streams (ranges, statistics, reproducibility), DLPack, devices."""

from __future__ import annotations

import gc
import pickle

import ml_dtypes
import numpy as np
import pytest
import torch

import ember
from conformance.oracle import ALL, FLOATS, INTS, TORCH_DTYPE, case, check, sample, tensors, to_torch
from ember.dtype import dtype_of


@pytest.mark.parametrize("data", [1, 2.5, True, [1, 2], [[1.0, 2.0], [3.0, 4.0]], [True, False], [], [[]],
                                  [[1, 2.5]], [True, 2], ((1, 2), (3, 4))])
def test_tensor_infers_torch_dtype(data, device):
    check(ember.tensor(data, device=device), torch.tensor(data))


@pytest.mark.parametrize("dtype", ALL)
def test_tensor_with_dtype_and_numpy_input(dtype, device, rng):
    check(ember.tensor([[1, 0], [3, 2]], dtype=dtype, device=device), torch.tensor([[1, 0], [3, 2]], dtype=TORCH_DTYPE[dtype]))
    x = sample((2, 3), dtype, rng)
    e = ember.tensor(x, device=device)
    check(e, to_torch(x))
    assert e.device is device
    x_view = x.T  # non-contiguous input is copied
    check(ember.tensor(x_view, device=device), to_torch(x_view))
    scalar = x.reshape(-1)[0]  # a NumPy scalar keeps its dtype
    check(ember.tensor(scalar, device=device), to_torch(np.asarray(scalar)))


def test_tensor_copies_and_from_numpy_shares(device):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    copied, shared = ember.tensor(x, device=device), ember.from_numpy(x, device=device)
    x[0, 0] = 100
    assert copied.numpy()[0, 0] == 0
    # from_numpy shares memory on host devices; a device (wgpu, CUDA) holds a copy.
    assert shared.numpy()[0, 0] == (100 if device.kind in ("numpy", "cpu", "torch:cpu") else 0)
    assert not copied.numpy().flags.writeable
    t = ember.tensor(copied, dtype="f64", device=device)
    assert t.dtype == ember.f64 and t.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    nested = ember.tensor([copied[0], copied[1]], device=device)
    assert nested.shape == (2, 3)


@pytest.mark.parametrize("dtype", ALL)
def test_constants(dtype, device):
    td = TORCH_DTYPE[dtype]
    for shape in [(), (0,), (2, 3), (2, 0, 4)]:
        with case(shape=shape):
            check(ember.zeros(*shape, dtype=dtype, device=device), torch.zeros(shape, dtype=td))
            check(ember.ones(shape, dtype=dtype, device=device), torch.ones(shape, dtype=td))
            check(ember.full(shape, 1, dtype=dtype, device=device), torch.full(shape, 1, dtype=td))
            e = ember.empty(*shape, dtype=dtype, device=device)
            assert e.shape == shape and e.dtype.name == dtype
    like = ember.ones(2, 3, dtype=dtype, device=device)
    tlike = torch.ones(2, 3, dtype=td)
    check(ember.zeros_like(like), torch.zeros_like(tlike))
    check(ember.ones_like(like), torch.ones_like(tlike))
    check(ember.full_like(like, 1), torch.full_like(tlike, 1))
    check(ember.zeros_like(like, dtype="f64"), torch.zeros_like(tlike, dtype=torch.float64))
    e = ember.empty_like(like)
    assert e.shape == (2, 3) and e.dtype == like.dtype and e.device is device
    assert like.new_zeros(4).shape == (4,) and like.new_zeros(4).dtype == like.dtype


def test_full_infers_dtype(device):
    for value in (7, 2.5, True):
        with case(value=value):
            check(ember.full((2, 2), value, device=device), torch.full((2, 2), value))
    assert ember.zeros(2, device=device).dtype == ember.f32


@pytest.mark.parametrize("args", [(5,), (2, 9), (2, 9, 3), (0, 1, 0.25), (1.5, 4), (-3, 4, 2), (5, 1, -1),
                                  (10, 0, -3), (0.0, 1.0, 0.1), (3, 3)])
def test_arange(args, device):
    check(ember.arange(*args, device=device), torch.arange(*args))
    for dtype in ("f64", "i32", "f16"):
        with case(dtype=dtype):
            check(ember.arange(*args, dtype=dtype, device=device), torch.arange(*args, dtype=TORCH_DTYPE[dtype]))


@pytest.mark.parametrize("args", [(0, 1, 5), (-2, 3, 1), (1, 0, 4), (0, 10, 0), (3.5, -1, 7)])
def test_linspace(args, device):
    check(ember.linspace(*args, device=device), torch.linspace(*args))
    check(ember.linspace(*args, dtype="f64", device=device), torch.linspace(*args, dtype=torch.float64))


@pytest.mark.parametrize("dtype", ALL)
def test_eye(dtype, device):
    for args in [(3,), (2, 4), (4, 2), (0,), (3, 0)]:
        with case(args=args):
            check(ember.eye(*args, dtype=dtype, device=device), torch.eye(*args, dtype=TORCH_DTYPE[dtype]))


# ---- random -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
def test_rand_and_randn(dtype, device):
    ember.seed(0)
    u = ember.rand(40000, dtype=dtype, device=device)  # enough draws that f16 would round some to 1.0
    assert u.dtype.name == dtype and u.shape == (40000,) and u.device is device
    values = np.asarray(u.numpy(), np.float64)
    assert values.min() >= 0 and values.max() < 1  # half-open even where rounding to f16/bf16 would reach 1
    assert abs(values.mean() - 0.5) < 0.03 and abs(values.var() - 1 / 12) < 0.01
    n = np.asarray(ember.randn(4000, dtype=dtype, device=device).numpy(), np.float64)
    assert abs(n.mean()) < 0.08 and abs(n.std() - 1) < 0.08
    assert len(np.unique(n)) > 100
    assert ember.rand(2, 3, device=device).dtype == ember.f32
    assert ember.randn((2, 3), device=device).shape == (2, 3)
    assert ember.rand(0, device=device).shape == (0,) and ember.rand(device=device).shape == ()
    w = np.asarray(ember.uniform(2000, low=-2, high=5, dtype=dtype, device=device).numpy(), np.float64)
    assert w.min() >= -2 and w.max() < 5 and abs(w.mean() - 1.5) < 0.2
    m = np.asarray(ember.normal(2000, mean=3, std=0.5, dtype=dtype, device=device).numpy(), np.float64)
    assert abs(m.mean() - 3) < 0.05 and abs(m.std() - 0.5) < 0.05


@pytest.mark.parametrize("dtype", INTS)
def test_randint(dtype, device):
    low, high = (0, 200) if dtype == "u8" else (-50, 70)
    r = ember.randint(low, high, (3000,), dtype=dtype, device=device)
    assert r.dtype.name == dtype and r.shape == (3000,)
    values = r.numpy()
    assert values.min() == low and values.max() == high - 1  # 3000 draws hit both ends
    assert abs(values.mean() - (low + high - 1) / 2) < 5
    assert ember.randint(5, size=(2, 2), device=device).dtype == ember.i64
    assert set(np.unique(ember.randint(3, size=(500,), device=device).numpy())) == {0, 1, 2}


def test_bernoulli_and_random_likes(device):
    p = ember.tensor([0.0, 1.0, 0.3] * 1000, device=device)
    draws = ember.bernoulli(p).numpy().reshape(-1, 3)
    assert draws.dtype == np.float32
    assert (draws[:, 0] == 0).all() and (draws[:, 1] == 1).all()
    assert abs(draws[:, 2].mean() - 0.3) < 0.05
    x = ember.zeros(2, 3, dtype="f64", device=device)
    for fn in (ember.rand_like, ember.randn_like):
        with case(fn=fn.__name__):
            y = fn(x)
            assert y.shape == (2, 3) and y.dtype == ember.f64 and y.device is device
    y = ember.randint_like(ember.zeros(4, dtype="i32", device=device), 3, 9)
    assert y.dtype == ember.i32 and 3 <= y.numpy().min() and y.numpy().max() < 9


def test_reproducible_streams(device):
    ember.seed(123)
    a = [ember.rand(5, device=device).tolist(), ember.randn(3, device=device).tolist(),
         ember.randint(0, 100, (4,), device=device).tolist()]
    ember.seed(123)
    b = [ember.rand(5, device=device).tolist(), ember.randn(3, device=device).tolist(),
         ember.randint(0, 100, (4,), device=device).tolist()]
    assert a == b
    device.seed(7)
    c = ember.rand(5, device=device).tolist()
    device.seed(7)
    assert ember.rand(5, device=device).tolist() == c
    assert c != a[0]
    # consecutive draws differ, and a device's autodiff variant shares its stream
    device.seed(7)
    first = ember.rand(5, device=device.autodiff()).tolist()
    assert first == c
    assert ember.rand(5, device=device).tolist() != c


# ---- host interop --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL)
def test_host_interop(dtype, device, rng):
    x = sample((2, 3), dtype, rng)
    e = ember.tensor(x, device=device)
    np.testing.assert_array_equal(e.numpy(), x)
    assert e.numpy().dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(e), x)
    assert np.asarray(e, dtype=np.float64).dtype == np.float64
    assert e.tolist() == x.tolist()
    assert ember.tensor(x[0, 0], device=device).item() == x[0, 0].item()
    assert type(ember.tensor(x[0, 0], device=device).item()) is type(x[0, 0].item())
    assert e[1, 2].item() == x[1, 2].item()
    t = torch.from_dlpack(e)  # bf16 too: ember tags it kDLBfloat, which NumPy alone cannot
    assert t.dtype == TORCH_DTYPE[dtype]
    np.testing.assert_array_equal(t.float().cpu().numpy() if dtype == "bf16" else t.cpu().numpy(), x)
    if dtype != "bf16" and device.kind != "cuda":  # NumPy has no bf16 to take, and takes host memory only
        np.testing.assert_array_equal(np.from_dlpack(e), x)
    back = ember.from_dlpack(to_torch(x), device=device)
    assert back.dtype.name == dtype
    check(back, to_torch(x))
    view = e.T[::-1]
    np.testing.assert_array_equal(torch.from_dlpack(view).float().cpu().numpy(), x.T[::-1].astype(np.float32))


@pytest.mark.parametrize("dtype", ALL)
def test_dlpack_shares_host_memory_both_ways(dtype, device, rng):
    """On the host devices a torch tensor's memory becomes ember's and goes back to torch uncopied: the
    round trip ends at torch's own data pointer; the memory outlives the torch tensor it came from."""
    x = sample((3, 5), dtype, rng)
    t = to_torch(x)
    e = ember.from_dlpack(t, device=device)
    again = torch.from_dlpack(e)
    assert torch.equal(again.cpu(), t)
    if device.kind in ("numpy", "cpu"):
        assert again.data_ptr() == t.data_ptr()
    del t, again
    gc.collect()
    np.testing.assert_array_equal(e.numpy(), x)


def test_from_dlpack_of_a_torch_view(device):
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4).T
    e = ember.from_dlpack(t, device=device)
    check(e, t)
    assert e.device is device


@pytest.mark.parametrize("dtype", ALL)
def test_cast(dtype, device, rng):
    x = np.array([-2.7, -0.5, 0.0, 0.4, 1.5, 2.5, 100.9], np.float64)
    for src in ("f64", "f32", "f16", "bf16", "i64", "i16", "bool"):
        with case(src=src):
            xs = x if src in FLOATS else (x.astype(np.int64) if src != "bool" else x != 0)
            e, t = tensors(xs.astype(dtype_of(src).np), device)
            if dtype == "u8" and src in FLOATS:
                e, t = e.abs(), t.abs()  # negative floats to u8 are undefined behaviour in C and PyTorch
            check(e.cast(dtype), t.to(TORCH_DTYPE[dtype]))
            check(e.to(dtype), t.to(TORCH_DTYPE[dtype]))
            check(e.to(getattr(ember, dtype if dtype != "bool" else "bool_")), t.to(TORCH_DTYPE[dtype]))


def test_to_device_and_pickle(device, rng):
    x = sample((2, 3), "f32", rng)
    e = ember.tensor(x, device=device)
    other = ember.Device.cpu() if device.kind == "numpy" else ember.Device.numpy()
    moved = e.to(other)
    assert moved.device is other and moved.tolist() == e.tolist()
    assert e.to(device) is e
    assert e.to(str(device.kind)).device is ember.Device(device.kind)
    tracked = e.to(device.autodiff())
    assert tracked.device is device.autodiff() and tracked.inner().device is device
    back = pickle.loads(pickle.dumps(e))
    assert back.device is device and back.tolist() == e.tolist() and back.dtype == e.dtype
    b16 = ember.tensor(x, dtype="bf16", device=device)
    assert pickle.loads(pickle.dumps(b16)).numpy().dtype == ml_dtypes.bfloat16


def test_scalar_conversions(device):
    e = ember.tensor([[3.5]], device=device)
    assert float(e) == 3.5 and int(e) == 3 and bool(e)
    assert [int(v) for v in ember.tensor([1, 2, 3], device=device)] == [1, 2, 3]
    assert list(range(10))[ember.tensor(4, device=device)] == 4
    assert len(ember.zeros(5, 2, device=device)) == 5
    assert ember.zeros(2, 3, device=device).size() == (2, 3) and ember.zeros(2, 3, device=device).size(-1) == 3
    assert ember.zeros(2, 3, device=device).numel == 6 and ember.zeros(2, 3, device=device).ndim == 2
    text = repr(ember.tensor([1.5, 2.0], dtype="f64", device=device))
    assert "1.5" in text and "f64" in text and repr(device) in text
