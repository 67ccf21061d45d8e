"""`Device`: where tensors live, chosen at run time. The user API never names a backend.

| device              | backend stack (`ember.dispatch.build_backend`)                        |
|---------------------|-----------------------------------------------------------------------|
| `Device.numpy()`    | the NumPy reference backend                                           |
| `Device.cpu()`      | Fusion(Cube(cpu)): cube kernels rendered to C, built with gcc/OpenMP   |
| `Device.cuda(i)`    | Fusion(Cube(cuda)) on GPU i: CUDA C compiled by NVRTC (`cuda` extra)   |
| `Device.wgpu(i)`    | Fusion(Cube(wgpu)) on adapter i: WGSL run through wgpu (`wgpu` extra)  |
| `Device.torch(spec)`| torch ops on the torch device `spec` ("cpu", "cuda:0", "mps", "xpu") |
| `Device.remote(t)`  | ops run by the `ember serve` server of ticket `t` (`remote` extra)     |

`device.autodiff()` is the same device with gradient tracking on: tensors made on it are recorded by the
autodiff decorator. Devices are interned values: `Device("cuda:1") is Device.cuda(1)`. Constructing a
device never fails for a known kind; using one whose backend cannot run here raises
`DeviceUnavailableError` saying what is missing and what installs it (as `torch.device("cuda")` can be
named on a machine without a GPU): `Device.cpu()` needs a C compiler with OpenMP, and without one
`Device.default()` is `Device.numpy()`; `Device.cuda(i)` needs the `cuda` extra, a driver and a GPU;
`Device.wgpu(i)` needs the `wgpu` extra and an adapter; `Device.torch(spec)` needs PyTorch with that
device; `Device.remote(ticket)` connects on first use and raises `RemoteError` if refused.

Example:
    >>> Device("cpu").autodiff()
    Device("cpu").autodiff()
    >>> Device.default()          # EMBER_DEVICE, else the best available
    Device("cpu")
"""

from __future__ import annotations

import importlib.util
import os
import threading

from .autodiff import CHECKPOINTING
from .dispatch import build_backend
from .errors import DeviceError, DeviceUnavailableError
from .random import stream_of

KINDS = ("numpy", "cpu", "cuda", "wgpu", "torch", "remote")
_INDEXED = ("cuda", "wgpu")
_TORCH = "torch:"  # a torch device's kind is "torch:" and torch's device type: "torch:cuda", "torch:cpu"
_UNINDEXED_TORCH = ("cpu", "mps")  # torch device types shown without an index
_TICKETS: list[str] = []  # a remote device's index is its ticket's position here


class Device:
    """A run-time device: kind, index, and whether autodiff tracks tensors made on it."""

    __slots__ = ("kind", "index", "checkpointing", "is_autodiff", "_backend", "__weakref__")

    # The registry of interned devices: one object per (kind, index, autodiff, checkpointing).
    _interned: dict[tuple, "Device"] = {}
    _lock = threading.Lock()

    def __new__(cls, spec: "str | Device" = "cpu") -> "Device":
        if isinstance(spec, Device):
            return spec
        kind, index = _parse(spec)
        return cls._get(kind, index, False, None)

    @classmethod
    def _get(cls, kind: str, index: int, autodiff: bool, checkpointing: str | None) -> "Device":
        key = (kind, index, autodiff, checkpointing)
        device = cls._interned.get(key)
        if device is None:
            with cls._lock:
                device = cls._interned.get(key)
                if device is None:
                    device = object.__new__(cls)
                    device.kind, device.index = kind, index
                    device.is_autodiff, device.checkpointing = autodiff, checkpointing
                    device._backend = None
                    cls._interned[key] = device
        return device

    # ---- constructors ----------------------------------------------------------------------------
    @classmethod
    def numpy(cls) -> "Device":
        """The NumPy reference backend: always available, eager, the oracle for the others."""
        return cls._get("numpy", 0, False, None)

    @classmethod
    def cpu(cls) -> "Device":
        """The CPU device, served by Fusion(Cube(cpu)): kernels compiled to C at run time (needs a C
        compiler with OpenMP: `[compilation] compiler`, gcc or clang)."""
        return cls._get("cpu", 0, False, None)

    @classmethod
    def cuda(cls, index: int = 0) -> "Device":
        """The CUDA GPU `index`, served by Fusion(Cube(cuda)); using it without the `cuda` extra, a
        driver or that GPU raises `DeviceUnavailableError`."""
        return cls._get("cuda", _check_index(index), False, None)

    @classmethod
    def wgpu(cls, index: int = 0) -> "Device":
        """Adapter `index` of `ember.cube.runtime.wgpu.adapters()` (best first), served by
        Fusion(Cube(wgpu)); using it without the `wgpu` extra or that adapter raises
        `DeviceUnavailableError`."""
        return cls._get("wgpu", _check_index(index), False, None)

    @classmethod
    def torch(cls, spec: str = "cpu") -> "Device":
        """ember's primitives run by PyTorch on the torch device `spec` ("cpu", "cuda:0", "mps", "xpu:1";
        ROCm builds call their GPUs "cuda"), with no fusion: ember runs wherever torch does, and
        `.autodiff()` puts ember's autodiff on top. A bare type means its device 0. Using it without
        torch, or on a device torch does not have here, raises `DeviceUnavailableError` naming what to
        install or what torch reports available.

        Example:
            >>> Device.torch("cuda").autodiff()
            Device.torch("cuda:0").autodiff()
        """
        kind, index = _parse_torch(spec)
        return cls._get(kind, index, False, None)

    @classmethod
    def remote(cls, ticket: str) -> "Device":
        """The device served by `ember serve` whose ticket is `ticket` (docs/remote.md): ops run there on
        the server's own stack, the tape of `.autodiff()` stays here. It connects on first use (iroh
        QUIC; the `remote` extra) and raises `RemoteError` with the server's reason when refused.

        Example:
            >>> Device.remote(ticket).autodiff()          # doctest: +SKIP
            Device.remote("emberxyz...").autodiff()
        """
        if not isinstance(ticket, str) or not ticket.strip():
            raise DeviceError(f"Device.remote: expected a ticket printed by `ember serve`, got {ticket!r}")
        ticket = ticket.strip()
        with cls._lock:
            if ticket not in _TICKETS:
                _TICKETS.append(ticket)
            index = _TICKETS.index(ticket)
        return cls._get("remote", index, False, None)

    @property
    def ticket(self) -> str:
        """The ticket of a `Device.remote(ticket)` device."""
        if self.kind != "remote":
            raise DeviceError(f"{self!r} is not a remote device: it has no ticket")
        return _TICKETS[self.index]

    @classmethod
    def default(cls) -> "Device":
        """`EMBER_DEVICE` if set (e.g. `cuda:0`, `numpy`), else `[device] default` of `ember.toml`, else
        the best of cuda:0, cpu and numpy that runs here. A wgpu adapter is never picked by default
        (listing adapters takes seconds, and a software adapter is slower than `cpu`): name it.

        Example:
            >>> Device.default()
            Device("cpu")
        """
        from .settings import settings  # lazy: ember.toml's reader loads on first use, not at import ember
        spec = os.environ.get("EMBER_DEVICE") or settings().get("device", "default")
        if spec:
            return cls(spec)
        return available_devices()[0]

    @classmethod
    def enumerate(cls) -> list["Device"]:
        """The devices usable on this machine, best first: cuda:0, the wgpu hardware adapters, cpu, the
        wgpu software adapters, numpy. `Device.wgpu(i)` is adapter i of
        `ember.cube.runtime.wgpu.adapters()`, which gives each adapter's name, kind and backend (Vulkan,
        Metal, D3D12, OpenGL); they are listed once per process.

        Example:
            >>> Device.enumerate()
            [Device("cpu"), Device("wgpu:0"), Device("wgpu:1"), Device("numpy")]
        """
        hardware, software = wgpu_devices()
        found = available_devices()
        at_cpu = next((i for i, d in enumerate(found) if d.kind in ("cpu", "numpy")), len(found))
        found[at_cpu:at_cpu] = hardware
        found[-1:-1] = software  # numpy is always last
        return found

    # ---- variants --------------------------------------------------------------------------------
    def autodiff(self, checkpointing: str | None = None) -> "Device":
        """This device with gradient tracking on.

        `checkpointing="balanced"` keeps only the outputs of costly ops (matmul, reductions, ...) and
        recomputes cheap ones (elementwise, movement) during backward, trading compute for memory.
        """
        if checkpointing not in CHECKPOINTING:
            raise ValueError(f"unknown checkpointing strategy {checkpointing!r}; known: {CHECKPOINTING}")
        return Device._get(self.kind, self.index, True, checkpointing)

    @property
    def torch_spec(self) -> str:
        """The torch device string of a `Device.torch(...)` device: "cpu", "cuda:0", "mps", "xpu:1".

        Example:
            >>> Device.torch("cuda").torch_spec
            'cuda:0'
        """
        kind = self.kind[len(_TORCH):]
        return kind if kind in _UNINDEXED_TORCH and self.index == 0 else f"{kind}:{self.index}"

    @property
    def inner(self) -> "Device":
        """This device without autodiff."""
        return Device._get(self.kind, self.index, False, None)

    # ---- services --------------------------------------------------------------------------------
    @property
    def backend(self):
        """The backend stack serving this device (built once, on first use, by `dispatch.build_backend`);
        `DeviceUnavailableError` saying what is missing and which devices run here."""
        backend = self._backend
        if backend is None:
            try:
                backend = self._backend = build_backend(self)
            except DeviceUnavailableError as e:
                if self.is_autodiff:  # the inner device's error, which lists them already
                    raise
                raise DeviceUnavailableError(f"{e}; available: {available_devices()}") from None
        return backend

    def seed(self, seed: int) -> None:
        """Restart this device's random stream from `seed` (see `ember.seed` for all devices)."""
        stream_of(self).reset(seed)

    def sync(self) -> None:
        """Wait for all work queued on this device."""
        self.backend.sync()

    def memory_stats(self, reset_peaks: bool = False):
        """Bytes of this device's memory pool: reserved from the device, in use by tensors, and their
        peaks (a `MemoryStats`); with `reset_peaks` the peaks then restart from the current bytes (torch's
        `reset_peak_memory_stats`), so the next call's peaks are those of what ran in between. The NumPy
        device has no pool: it raises `DeviceError`.

        Example:
            >>> Device.cpu().memory_stats(reset_peaks=True).in_use >= 0
            True
        """
        return self._pooled("memory_stats")(reset_peaks)

    def memory_cleanup(self) -> int:
        """Give the empty pages of this device's memory pool back; returns the bytes released.

        Example:
            >>> Device.cpu().memory_cleanup() >= 0
            True
        """
        return self._pooled("memory_cleanup")()

    def _pooled(self, method: str):
        backend = self.inner.backend
        while backend is not None:  # through the decorators (fusion) to the backend that owns memory
            found = getattr(backend, method, None)
            if found is not None:
                return found
            backend = getattr(backend, "inner", None)
        raise DeviceError(f"{self!r} has no memory pool (NumPy allocates each array itself): "
                          f"memory_stats and memory_cleanup need a cube device such as Device.cpu()")

    # ---- value behaviour -------------------------------------------------------------------------
    def __repr__(self) -> str:
        if self.kind.startswith(_TORCH):
            text = f'Device.torch("{self.torch_spec}")'
        elif self.kind == "remote":
            ticket = self.ticket  # shortened: a ticket is ~200 characters
            text = f'Device.remote("{ticket[:13]}...{ticket[-6:]}")'
        else:
            name = self.kind if self.kind not in _INDEXED else f"{self.kind}:{self.index}"
            text = f'Device("{name}")'
        if self.is_autodiff:
            text += f'.autodiff(checkpointing="{self.checkpointing}")' if self.checkpointing else ".autodiff()"
        return text

    def __reduce__(self):
        if self.kind == "remote":  # the ticket, not its index here
            return (_remote, (self.ticket, self.is_autodiff, self.checkpointing))
        return (Device._get, (self.kind, self.index, self.is_autodiff, self.checkpointing))


def _remote(ticket: str, autodiff: bool, checkpointing: str | None) -> Device:
    device = Device.remote(ticket)
    return device.autodiff(checkpointing) if autodiff else device


def available_devices() -> list[Device]:
    """Devices whose backend runs on this machine, best first (cuda:0 when a GPU, its driver and NVRTC
    are here; cpu only when a C compiler builds kernels)."""
    from . import cube  # lazy: the kernel library and its compilers load on first use
    from .cube.runtime.cuda import cuda_available  # lazy: probes the `cuda` extra
    from .cube.runtime.nvrtc import nvrtc_available  # lazy: probes the `cuda` extra
    gpu = [Device.cuda(0)] if cuda_available()[0] and nvrtc_available()[0] else []
    return gpu + ([Device.cpu(), Device.numpy()] if cube.cpu_available()[0] else [Device.numpy()])


def wgpu_devices() -> tuple[list[Device], list[Device]]:
    """(hardware, software) wgpu devices, one per adapter of `ember.cube.runtime.wgpu.adapters()`; both
    empty without wgpu-py or an adapter."""
    from .cube.runtime.wgpu import listed_adapters, wgpu_available  # lazy: probes the `wgpu` extra
    if importlib.util.find_spec("wgpu") is None or not wgpu_available()[0]:
        return [], []
    found = listed_adapters()
    return ([Device.wgpu(a.index) for a in found if a.kind != "CPU"],
            [Device.wgpu(a.index) for a in found if a.kind == "CPU"])


def _check_index(index: int) -> int:
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise DeviceError(f"device index must be a non-negative int, got {index!r}")
    return index


def _parse_torch(spec: str) -> tuple[str, int]:
    """("torch:" + type, index) of a torch device string; the type is checked by torch when used."""
    if not isinstance(spec, str):
        raise DeviceError(f"Device.torch: expected a torch device string such as 'cpu' or 'cuda:0', got {spec!r}")
    kind, _, index = spec.strip().lower().partition(":")
    if not (kind.isidentifier() and kind.isascii()) or (index and not index.isdigit()):
        raise DeviceError(f"Device.torch: bad torch device string {spec!r}; expected a type and an optional "
                          f"index, e.g. 'cpu', 'cuda:0', 'mps', 'xpu:1'")
    return _TORCH + kind, int(index or 0)


def _parse(spec: str) -> tuple[str, int]:
    if not isinstance(spec, str):
        raise DeviceError(f"expected a device string such as 'cpu' or 'cuda:0', got {spec!r}")
    kind, _, index = spec.strip().lower().partition(":")
    if kind == "torch":
        return _parse_torch(index or "cpu")
    if kind == "remote":
        return kind, Device.remote(spec.strip()[len("remote:"):]).index
    if kind not in KINDS:
        raise DeviceError(f"unknown device {spec!r}; known kinds: {', '.join(KINDS)} "
                          f"(e.g. 'cpu', 'numpy', 'cuda:0', 'wgpu:0', 'torch:cuda:0')")
    if not index:
        return kind, 0
    if kind not in _INDEXED or not index.isdigit():
        raise DeviceError(f"bad device index in {spec!r}: only {' and '.join(_INDEXED)} take ':N'")
    return kind, int(index)
