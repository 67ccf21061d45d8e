"""`Device`: parsing, identity (interning), hashing, repr, default(), enumerate, seeds, sync,
autodiff variants and pickling."""

from __future__ import annotations

import pickle

import pytest

import ember
from ember import Device


@pytest.mark.parametrize("spec, kind, index", [("cpu", "cpu", 0), ("numpy", "numpy", 0), ("cuda", "cuda", 0),
                                               ("cuda:1", "cuda", 1), ("wgpu:3", "wgpu", 3), (" CPU ", "cpu", 0),
                                               ("CUDA:12", "cuda", 12)])
def test_parse(spec, kind, index):
    d = Device(spec)
    assert (d.kind, d.index, d.is_autodiff, d.checkpointing) == (kind, index, False, None)


def test_interning_equality_hashing():
    assert Device("cuda:1") is Device.cuda(1)
    assert Device("cpu") is Device.cpu() is Device(Device.cpu())
    assert Device("numpy") is Device.numpy()
    assert Device.cuda(0) is Device("cuda") and Device.cuda(0) is not Device.cuda(1)
    assert Device.cpu() != Device.numpy() and Device.cpu() == Device("cpu")
    assert len({Device("cpu"), Device.cpu(), Device.numpy(), Device.cpu().autodiff(), Device.cpu().autodiff()}) == 3
    assert Device.cpu().autodiff() is Device.cpu().autodiff()
    assert Device.cpu().autodiff() is not Device.cpu()
    assert Device.cpu().autodiff("balanced") is not Device.cpu().autodiff()
    assert Device.cpu().autodiff().inner is Device.cpu()
    assert Device.cpu().autodiff().autodiff() is Device.cpu().autodiff()


def test_repr():
    assert repr(Device.cpu()) == 'Device("cpu")'
    assert repr(Device.numpy()) == 'Device("numpy")'
    assert repr(Device.cuda(1)) == 'Device("cuda:1")'
    assert repr(Device.wgpu()) == 'Device("wgpu:0")'
    assert repr(Device.cpu().autodiff()) == 'Device("cpu").autodiff()'
    assert repr(Device.numpy().autodiff("balanced")) == 'Device("numpy").autodiff(checkpointing="balanced")'


def test_default_honours_environment(monkeypatch):
    monkeypatch.setenv("EMBER_DEVICE", "numpy")
    assert Device.default() is Device.numpy()
    assert ember.zeros(2).device is Device.numpy()
    monkeypatch.setenv("EMBER_DEVICE", "cuda:1")
    assert Device.default() is Device.cuda(1)  # naming an unavailable device is fine; using it raises
    with pytest.raises(ember.DeviceUnavailableError):
        ember.zeros(2)
    monkeypatch.setenv("EMBER_DEVICE", "tpu")
    with pytest.raises(ember.DeviceError, match="tpu"):
        Device.default()
    monkeypatch.delenv("EMBER_DEVICE")
    from ember.settings import reload, settings
    reload()  # settings are read once per process: the first read may have seen EMBER_DEVICE above
    configured = settings().get("device", "default")  # an ember.toml may name one; else the best available
    assert Device.default() is (Device(configured) if configured else Device.enumerate()[0])
    assert ember.zeros(2).device is Device.default()


def test_enumerate():
    devices = Device.enumerate()
    assert devices[0] is Device.cpu() and Device.numpy() in devices
    assert all(not d.is_autodiff for d in devices)
    for d in devices:
        assert ember.ones(2, device=d).sum().item() == 2.0  # each listed device works


@pytest.mark.parametrize("make", [Device.numpy, Device.cpu], ids=["numpy", "cpu"])
def test_seed_and_sync(make):
    d = make()
    d.seed(5)
    a = ember.rand(4, device=d).tolist()
    d.sync()
    d.seed(5)
    assert ember.rand(4, device=d).tolist() == a
    assert ember.rand(4, device=d).tolist() != a
    other = Device.numpy() if d is Device.cpu() else Device.cpu()
    other.seed(5)
    d.seed(6)  # seeding one device leaves the others' streams alone
    assert ember.rand(4, device=other).tolist() == a
    d.autodiff().sync()
    with pytest.raises(ValueError):
        d.seed(-1)


def test_without_a_c_compiler_cpu_is_unavailable_and_numpy_is_the_default(monkeypatch):
    from ember.cube.runtime import cpu
    from ember.dispatch import build_backend
    from ember.settings import reload
    monkeypatch.setattr(cpu, "_probe", (False, "no C compiler found (install gcc or clang, or set EMBER_CC)"))
    monkeypatch.delenv("EMBER_DEVICE", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent")  # no user ember.toml naming a device
    monkeypatch.chdir("/")
    reload()
    try:
        assert Device.cpu() not in Device.enumerate() and Device.enumerate()[-1] is Device.numpy()
        assert Device.default() is Device.numpy()
        with pytest.raises(ember.DeviceUnavailableError, match=r"(?s)gcc, clang.*no C compiler.*Device\.numpy\(\) works"):
            build_backend(Device.cpu())
    finally:
        monkeypatch.undo()
        reload()


def test_one_seed_gives_the_same_numbers_on_numpy_and_cpu():
    """The random stream is defined once (ember/random.py): bits-exact draws agree exactly, transformed
    ones to the dtype's last bits (a fused multiply-add, libm's log/sin/cos)."""
    import numpy as np
    from ember.nn.dropout import dropout

    def draws(device):
        device.seed(1234)
        out = {f"rand {d}": ember.rand(3, 67, dtype=d, device=device) for d in ("f64", "f32", "f16", "bf16")}
        out |= {f"randn {d}": ember.randn(101, dtype=d, device=device) for d in ("f64", "f32", "f16")}
        out["uniform"] = ember.uniform(50, low=-3, high=0.5, device=device)
        out |= {f"randint {d}": ember.randint(-5, 2**20, (9, 7), dtype=d, device=device) for d in ("i64", "i32")}
        out["bernoulli"] = ember.bernoulli(ember.full((200,), 0.3, device=device))
        out["dropout"] = dropout(ember.ones(300, device=device), p=0.4)
        return {k: v.numpy().astype(np.float64) for k, v in out.items()}

    cpu, ref = draws(Device.cpu()), draws(Device.numpy())
    for name, want in ref.items():
        if name.startswith(("randn", "uniform")):
            np.testing.assert_allclose(cpu[name], want, rtol=1e-6 if "f64" not in name else 1e-14, atol=1e-6,
                                       err_msg=name)
        else:
            np.testing.assert_array_equal(cpu[name], want, err_msg=name)
    assert len(np.unique(ref["rand f64"])) == ref["rand f64"].size  # 53 random bits: no repeats


def test_autodiff_variants():
    d = Device.cpu().autodiff()
    assert d.is_autodiff and d.checkpointing is None
    b = Device.numpy().autodiff(checkpointing="balanced")
    assert b.is_autodiff and b.checkpointing == "balanced" and b.inner is Device.numpy()
    with pytest.raises(ValueError, match="checkpointing"):
        Device.cpu().autodiff(checkpointing="sometimes")
    x = ember.ones(2, device=d)
    assert x.device is d and not x.requires_grad
    assert x.require_grad().requires_grad


def test_pickling():
    for d in [Device.cpu(), Device.numpy(), Device.cuda(2), Device.cpu().autodiff(),
              Device.numpy().autodiff("balanced")]:
        assert pickle.loads(pickle.dumps(d)) is d


@pytest.mark.parametrize("make, extra", [(lambda: Device.cuda(0), "cuda"), (lambda: Device.wgpu(0), "wgpu")])
def test_unavailable_devices_say_what_is_missing(make, extra, monkeypatch):
    from ember import dispatch
    monkeypatch.setattr(dispatch.importlib.util, "find_spec", lambda name, *a: None)  # as without the extra
    d = make()  # constructing never fails
    monkeypatch.setattr(d, "_backend", None)  # built by earlier tests where the extra is installed
    with pytest.raises(ember.DeviceUnavailableError) as info:
        ember.zeros(2, device=d)
    message = str(info.value)
    assert repr(d) in message and f"ember[{extra}]" in message and 'Device("cpu")' in message
    with pytest.raises(ember.DeviceUnavailableError):
        ember.ones(2, device="numpy").to(d)
    with pytest.raises(ember.DeviceUnavailableError):
        d.sync()


@pytest.mark.parametrize("bad", ["tpu", "gpu:0", "cpu:1", "numpy:0", "cuda:x", "cuda:-1", "", 3])
def test_bad_device_strings(bad):
    with pytest.raises(ember.DeviceError) as info:
        Device(bad)
    message = str(info.value)
    if isinstance(bad, str) and bad and bad.split(":")[0] not in ("cpu", "numpy", "cuda"):
        assert "numpy" in message and "cpu" in message and "cuda" in message and "wgpu" in message


@pytest.mark.parametrize("index", [-1, 1.5, True, "0"])
def test_bad_device_index(index):
    with pytest.raises(ember.DeviceError, match="index"):
        Device.cuda(index)


def test_enumerate_lists_each_wgpu_adapter_by_kind():
    from ember.cube.runtime.wgpu import listed_adapters, wgpu_available
    if not wgpu_available()[0]:
        pytest.skip(f"no wgpu adapter: {wgpu_available()[1]}")
    found = Device.enumerate()
    adapters = listed_adapters()
    assert [d for d in found if d.kind == "wgpu"] == sorted(
        (Device.wgpu(a.index) for a in adapters), key=lambda d: [a.kind for a in adapters][d.index] == "CPU")
    assert found[-1] is Device.numpy() and Device.default() in (Device.cpu(), Device.numpy())
    for d in found:  # hardware adapters before cpu, software adapters after it
        if d.kind == "wgpu" and Device.cpu() in found:
            cpu_first = found.index(Device.cpu()) < found.index(d)
            assert cpu_first == (adapters[d.index].kind == "CPU")
