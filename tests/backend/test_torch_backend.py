"""The torch backend (`Device.torch`): each row against its primitive's NumPy reference where ember defines
the semantics (integer division, shifts, casts, NaN, halves, bool arithmetic), the fallbacks it
documents, transfers, random numbers, the module ops' odd params, and the errors of a missing torch or
device. The conformance and trajectory suites run on it through the `device` fixture ("torch-cpu").
"""

from __future__ import annotations

import importlib.util
import pickle
import warnings

import ml_dtypes
import numpy as np
import pytest
import torch

import ember
from ember import Device
from ember.backend.torch import convert
from ember.backend.torch.table import MISSING, TABLE
from ember.dtype import dtype_of
from ember.errors import DeviceError, DeviceUnavailableError
from ember.ops import registry
from ember.ops.primitive import Aval

TORCH_CPU = Device.torch("cpu")
INTS = ("i64", "i32", "i16", "i8", "u8")
FLOATS = ("f64", "f32", "f16", "bf16")


def backend():
    return TORCH_CPU.backend


def run(name: str, *arrays: np.ndarray, **params) -> np.ndarray:
    """Primitive `name` on the torch backend, host arrays in and out."""
    prim = registry[name]
    out = prim.infer(*(Aval(a.shape, dtype_of(a.dtype)) for a in arrays), **params)
    b = backend()
    result = b.to_host(b.execute(prim, [b.from_host(a) for a in arrays], params, out))
    assert result.shape == out.shape and result.dtype == out.dtype.np, f"{name}: {result.dtype} {result.shape}"
    return result


def reference(name: str, *arrays: np.ndarray, **params) -> np.ndarray:
    return np.asarray(registry[name].reference(*arrays, **params))


def assert_same(name: str, *arrays: np.ndarray, **params) -> None:
    """The row gives the reference's values bit for bit (NaNs where the reference has NaNs)."""
    got, want = run(name, *arrays, **params), reference(name, *arrays, **params)
    np.testing.assert_array_equal(got, want, err_msg=f"{name} on {arrays[0].dtype}")


def edge_ints(dtype: str, rng) -> np.ndarray:
    """Every edge of an integer dtype (0, +-1, MIN, MAX, MIN + 1) among random values, shape (4, 9)."""
    info = np.iinfo(dtype_of(dtype).np)
    edges = [0, 1, info.max, info.min, info.min + 1, info.max - 1] + ([-1, -2] if info.min else [2, 3])
    values = rng.integers(info.min, int(info.max) + 1, size=36 - len(edges))
    return np.concatenate([edges, values]).astype(dtype_of(dtype).np).reshape(4, 9)


@pytest.mark.parametrize("dtype", INTS)
def test_integer_division_and_remainder_by_zero_and_minus_one(dtype, rng):
    a = edge_ints(dtype, rng)
    for b in (edge_ints(dtype, rng)[::-1], np.zeros_like(a), np.full_like(a, -1 if dtype != "u8" else 255)):
        for name in ("floor_divide", "remainder", "add", "sub", "mul", "maximum", "minimum"):
            assert_same(name, a, b)


@pytest.mark.parametrize("dtype", INTS)
def test_shifts_by_any_amount(dtype, rng):
    a = edge_ints(dtype, rng)
    width = a.dtype.itemsize * 8
    amounts = np.array([0, 1, width - 1, width, width + 3, 2, 5, 7, 3], dtype=a.dtype)
    if dtype != "u8":
        amounts[-2:] = [-1, -width]
    amounts = np.broadcast_to(amounts, a.shape).copy()
    for name in ("left_shift", "right_shift", "bitwise_and", "bitwise_or", "bitwise_xor"):
        assert_same(name, a, amounts)
    assert_same("bitwise_not", a)


@pytest.mark.parametrize("source", FLOATS)
@pytest.mark.parametrize("target", INTS + ("bool",))
def test_float_to_int_casts_of_nan_inf_and_out_of_range(source, target, rng):
    values = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 2.9, -2.9, 127.5, 128.0, 255.9, 256.0, -129.0,
                       3e4, -3e4, 2.0 ** 31, -2.0 ** 31, 2.0 ** 33, 1e20, -1e20], np.float64)
    x = np.concatenate([values, rng.uniform(-70000, 70000, 17)]).astype(dtype_of(source).np)
    assert_same("cast", x, dtype=dtype_of(target))


@pytest.mark.parametrize("dtype", ("f32", "f16", "bf16"))
def test_nan_in_maximum_minimum_sign_and_extremes(dtype, rng):
    np_dtype = dtype_of(dtype).np
    a = rng.uniform(-2, 2, (5, 7)).astype(np_dtype)
    b = rng.uniform(-2, 2, (5, 7)).astype(np_dtype)
    a[0, :3] = np.nan
    b[1, :2] = np.nan
    for name in ("maximum", "minimum", "eq", "lt", "ge", "ne"):
        assert_same(name, a, b)
    for name in ("sign", "isnan", "abs", "neg", "floor", "round"):
        assert_same(name, a)
    for name in ("amax", "amin"):
        assert_same(name, a, dims=(1,), keepdim=False)
    for name in ("argmax", "argmin"):
        assert_same(name, a, dim=1, keepdim=True)
    assert_same("argsort", a, dim=1, descending=True)
    assert_same("cumextreme_index", a, dim=1, largest=True)


@pytest.mark.parametrize("dtype", ("f16", "bf16"))
def test_halves_compute_in_f32_and_round_once(dtype, rng):
    x = rng.uniform(0.1, 3, (3, 37)).astype(dtype_of(dtype).np)
    y = rng.uniform(0.1, 3, (3, 37)).astype(dtype_of(dtype).np)
    for name in ("add", "mul", "div", "sub"):  # correctly rounded in f32, then rounded to the half once
        assert_same(name, x, y)
    assert_same("sqrt", x)
    # Transcendentals and sums: torch's f32 math, rounded once, is within one half ulp of the reference.
    for name, params in (("exp", {}), ("log", {}), ("tanh", {}), ("sum", {"dims": (1,), "keepdim": False}),
                         ("cumsum", {"dim": 1})):
        got = run(name, x, **params).astype(np.float32)
        want = reference(name, x, **params).astype(np.float32)
        np.testing.assert_allclose(got, want, rtol=np.finfo(dtype_of(dtype).np).eps, err_msg=name)
    a, b = x[:, :5].copy(), y[:, :5].T.copy()
    np.testing.assert_allclose(run("matmul", a, b).astype(np.float32), reference("matmul", a, b).astype(np.float32),
                               rtol=np.finfo(dtype_of(dtype).np).eps)


def test_bool_arithmetic_reductions_and_scans(rng):
    a, b = rng.random((4, 6)) < 0.5, rng.random((4, 6)) < 0.5
    for name in ("add", "mul", "maximum", "minimum", "logical_xor", "bitwise_and", "eq"):
        assert_same(name, a, b)
    for name in ("abs", "logical_not", "bitwise_not"):
        assert_same(name, a)
    for name in ("sum", "prod", "amax", "amin"):
        assert_same(name, a, dims=(0,), keepdim=True)
        assert_same(name, a, dims=(0, 1), keepdim=False)
    for name in ("cumsum", "cumprod"):
        assert_same(name, a, dim=1)
    assert_same("argsort", a, dim=1, descending=False)
    assert_same("argmax", a, dim=0, keepdim=False)


@pytest.mark.parametrize("dtype", ("i8", "u8", "i64"))
def test_integer_sums_products_scans_and_matmul_wrap(dtype, rng):
    a = edge_ints(dtype, rng)
    for name in ("sum", "prod"):
        assert_same(name, a, dims=(1,), keepdim=False)
        assert_same(name, a, dims=(), keepdim=False)  # over no dims: the identity
    for name in ("cumsum", "cumprod"):
        assert_same(name, a, dim=0)
    assert_same("matmul", a, a.T.copy())
    assert_same("matmul", a[None, :, :5], np.stack([a.T[:5, :3], a.T[4:, 1:4]]))  # broadcast batch


@pytest.mark.parametrize("nd", (1, 2, 3))
def test_conv_transpose_and_weight_grad_odd_params(nd, rng):
    size, kernel = (5, 4, 3)[:nd], (3, 2, 2)[:nd]
    x = rng.standard_normal((2, 4) + size).astype(np.float32)
    w = rng.standard_normal((4, 3) + kernel).astype(np.float32)  # in 4, out 6 (groups 2): (in, out/g, *k)
    common = dict(stride=(2,) * nd, padding=(1,) * nd, dilation=(1,) * nd, groups=2)
    for extra in (-1, 0, 1, 3):  # a negative output_padding crops; one past the stride pads the end
        got = run("conv_transpose", x, w, output_padding=(extra,) * nd, **common)
        np.testing.assert_allclose(got, reference("conv_transpose", x, w, output_padding=(extra,) * nd, **common),
                                   rtol=1e-5, atol=1e-5)
    y = rng.standard_normal((2, 4) + size).astype(np.float32)
    full = registry["conv_weight_grad"].infer(Aval(y.shape, ember.f32), Aval((2, 6) + (1,) * nd, ember.f32),
                                              kernel=kernel, **common)
    outs = tuple((n + 2 - k) // 2 + 1 for n, k in zip(size, kernel))
    for covered in (outs, tuple(max(o - 1, 1) for o in outs)):  # a gradient of the leading outputs only
        g = rng.standard_normal((2, 6) + covered).astype(np.float32)
        got = run("conv_weight_grad", y, g, kernel=kernel, **common)
        assert got.shape == full.shape
        np.testing.assert_allclose(got, reference("conv_weight_grad", y, g, kernel=kernel, **common),
                                   rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ("f32", "bf16", "i32"))
def test_pools_unfold_fold_and_their_fallbacks(dtype, rng):
    x = (rng.standard_normal((2, 3, 7, 5)) * 10).astype(dtype_of(dtype).np)
    pool = dict(kernel=(3, 2), stride=(2, 2), padding=(1, 1), dilation=(1, 2), ceil_mode=True)
    before = set(backend().fallbacks)
    assert_same("max_pool", x, **pool)
    assert_same("max_pool_indices", x, **pool)
    if dtype != "i32":
        g = run("max_pool", x, **pool)
        assert_same("max_pool_grad", x, g, **pool)
        avg = dict(kernel=(3, 2), stride=(2, 1), padding=(1, 0), ceil_mode=True, count_include_pad=False,
                   divisor_override=None)
        np.testing.assert_allclose(run("avg_pool", x, **avg).astype(np.float32),
                                   reference("avg_pool", x, **avg).astype(np.float32), rtol=1e-2)
        window = dict(kernel=(2, 3), stride=(1, 2), padding=(1, 0), dilation=(2, 1))
        cols = run("unfold", x, **window)
        assert_same("unfold", x, **window)
        np.testing.assert_allclose(run("fold", cols, output_size=(7, 5), **window).astype(np.float32),
                                   reference("fold", cols, output_size=(7, 5), **window).astype(np.float32),
                                   rtol=1e-2)
    # Integers have no torch pool kernel: they run the reference and say so.
    assert set(backend().fallbacks) - before == ({"max_pool", "max_pool_indices"} - before if dtype == "i32" else set())


def test_the_fallbacks_are_the_documented_ones():
    # Every primitive of ember.ops has a row but the random ones (docs/backends.md, "The torch backend");
    # custom ops (ember.extension, registered by other tests) have none.
    # The primitives of ember/ops/search.py have no row yet either (docs/backends.md says so).
    core = {name for name, prim in registry.items() if prim.reference.__module__ != "ember.extension"}
    search = {"searchsorted", "scatter_reduce", "randperm", "multinomial"}
    complex_parts = {"fft", "rfft", "conj", "real", "imag", "complex"}  # the complex primitives: their references
    assert MISSING == {"uniform", "normal", "randint"} and core - set(TABLE) == MISSING | search | complex_parts
    assert set(TABLE) <= core


def test_random_numbers_are_the_other_devices(rng):
    for make in (lambda d: ember.rand(3, 5, device=d), lambda d: ember.randn(7, dtype="bf16", device=d),
                 lambda d: ember.randint(-5, 9, (4, 3), device=d)):
        ember.seed(11)
        want = make(Device.numpy()).numpy()
        ember.seed(11)
        got = make(TORCH_CPU).numpy()
        np.testing.assert_array_equal(got, want)
    assert {"uniform", "normal", "randint"} <= backend().fallbacks


def test_transfers_share_cpu_memory_and_keep_bf16_bits(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    h = convert.from_host(x, torch.device("cpu"))
    assert h.data_ptr() == x.ctypes.data  # no copy in
    assert np.shares_memory(convert.to_host(h), x)  # no copy out
    bits = rng.integers(0, 1 << 16, 50, dtype=np.uint16).view(ml_dtypes.bfloat16)
    back = convert.to_host(convert.from_host(bits, torch.device("cpu")))
    assert back.dtype == bits.dtype and back.view(np.uint16).tolist() == bits.view(np.uint16).tolist()
    flipped = x[::-1, ::-2]  # negative strides: copied
    assert convert.to_host(convert.from_host(flipped, torch.device("cpu"))).tolist() == flipped.tolist()
    readonly = np.arange(5, dtype=np.int16)
    readonly.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch.from_numpy would warn that it is not writable
        h = convert.from_host(readonly, torch.device("cpu"))
    assert h.data_ptr() == readonly.ctypes.data and h.tolist() == [0, 1, 2, 3, 4]


def test_autodiff_on_torch_matches_torch_autograd(rng):
    w0, x0 = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    w = ember.tensor(w0, device=TORCH_CPU.autodiff()).require_grad()
    x = ember.tensor(x0, device=TORCH_CPU)
    loss = ((x @ w).tanh() ** 2).mean()
    grads = loss.backward()
    tw = torch.tensor(w0, requires_grad=True)
    ((torch.tensor(x0) @ tw).tanh() ** 2).mean().backward()
    np.testing.assert_allclose(grads.get(w).numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_device_strings_repr_and_pickling():
    assert Device.torch("cuda") is Device("torch:cuda:0") is Device.torch(" CUDA:0 ")
    assert Device.torch() is Device("torch") is Device("torch:cpu") is TORCH_CPU
    assert repr(Device.torch("xpu:1").autodiff()) == 'Device.torch("xpu:1").autodiff()'
    assert repr(TORCH_CPU) == 'Device.torch("cpu")' and repr(Device.torch("mps")) == 'Device.torch("mps")'
    assert pickle.loads(pickle.dumps(TORCH_CPU.autodiff())) is TORCH_CPU.autodiff()
    assert ember.ones(2, device=TORCH_CPU).to("torch:cpu").device is TORCH_CPU
    for bad in ("cuda:x", "9gpu", "", 3):
        with pytest.raises(DeviceError, match="Device.torch"):
            Device.torch(bad)


def test_unknown_or_absent_torch_devices_say_what_torch_has():
    with pytest.raises(DeviceError, match=r"torch does not know the device 'gpu:0'.*available: cpu"):
        Device.torch("gpu").backend
    with pytest.raises(DeviceUnavailableError, match=r"available: cpu"):
        Device.torch("cuda:99").backend  # no CUDA here, or fewer than 100 GPUs
    with pytest.raises(DeviceError, match="meta device holds no values"):
        Device.torch("meta").backend


def test_cuda_convolutions_run_without_tf32_and_restore_the_setting():
    from types import SimpleNamespace
    from ember.backend.torch.nn import _ieee
    seen = []
    row = _ieee(lambda out, x: seen.append(torch.backends.cudnn.allow_tf32))
    previous = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = True
        row(None, SimpleNamespace(device=torch.device("cuda", 0)))  # only its device is read
        row(None, torch.ones(1))
        assert seen == [False, True] and torch.backends.cudnn.allow_tf32 is True
    finally:
        torch.backends.cudnn.allow_tf32 = previous


def test_f64_on_mps_is_refused_by_name():
    from ember.backend.cube.backend import UnsupportedDTypeError
    from ember.backend.torch.backend import TorchBackend
    mps = TorchBackend(torch.device("mps"))  # refused before torch touches the device, so it runs anywhere
    assert ember.f64 not in mps.dtypes and ember.f32 in mps.dtypes
    with pytest.raises(UnsupportedDTypeError, match=r"a tensor: f64 cannot be held by torch's 'mps' device"):
        mps.from_host(np.ones(2))
    with pytest.raises(UnsupportedDTypeError, match=r"full: f64 cannot be held"):
        mps.execute(registry["full"], [], {"shape": (2,), "value": 1.0, "dtype": ember.f64}, Aval((2,), ember.f64))


def test_a_missing_torch_names_the_package(monkeypatch):
    from ember.backend.torch import torch_backend
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(DeviceUnavailableError, match=r"needs PyTorch: pip install torch"):
        torch_backend(Device.torch("cuda:1"))
