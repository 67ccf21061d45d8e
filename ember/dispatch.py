"""Dispatch: from a device to its backend stack.

`build_backend(device)` is the table of stacks (what `Device.backend` builds once per device):

    numpy            -> Numpy
    cpu              -> Fusion(Cube(cpu)) (kernels compiled to C; DeviceUnavailableError without a C
                                          compiler; plain Cube(cpu) when [fusion] enabled is false)
    X.autodiff()     -> Autodiff(stack of X)
    wgpu:i           -> Fusion(Cube(wgpu)) on adapter i (DeviceUnavailableError without wgpu-py or an
                                          adapter; plain Cube(wgpu) when [fusion] enabled is false)
    cuda:i           -> Fusion(Cube(cuda)) on GPU i (DeviceUnavailableError without the `cuda` extra or a
                                          GPU; plain Cube(cuda) when [fusion] enabled is false)
    torch:spec       -> TorchBackend on torch's device `spec` (no fusion; DeviceUnavailableError without torch or
                                          that device)
    remote:ticket    -> RemoteBackend connected to the `ember serve` server of the ticket (which runs its
                                          own stack; DeviceUnavailableError without the `remote` extra)

A tensor op reaches the stack through `ember.tensor.bind`. The backends are imported when a device
first needs one: `import ember` loads no backend, and the GPU ones need optional extras.

Example:
    >>> build_backend(Device.numpy()).name
    'numpy'
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from .errors import DeviceUnavailableError

if TYPE_CHECKING:
    from .device import Device


def build_backend(device: Device):
    """The backend stack of `device`; raises `DeviceUnavailableError` when it cannot run here."""
    if device.is_autodiff:
        from .autodiff.backend import Autodiff  # lazy: a backend loads on its device's first use
        return Autodiff(device.inner.backend, device.checkpointing)
    if device.kind == "numpy":
        from .backend.numpy import NumpyBackend  # lazy: a backend loads on its device's first use
        return NumpyBackend()
    if device.kind == "cpu":
        return _fused(_cube_cpu(device))
    if device.kind == "wgpu":
        return _fused(_cube_wgpu(device))
    if device.kind.startswith("torch:"):
        from .backend.torch import torch_backend
        return torch_backend(device)
    if device.kind == "remote":
        from .backend.remote import remote_backend
        return remote_backend(device)
    return _fused(_cube_cuda(device))  # cuda, the one kind left


def _cube_cuda(device: Device):
    """Cube(cuda) on GPU `device.index` (kernels rendered to CUDA C, compiled by NVRTC, run through the
    driver API), or `DeviceUnavailableError` naming the `cuda` extra, the driver or the GPU missing."""
    from .cube.runtime.cuda import CudaError, cuda_available, cuda_runtime  # lazy: the `cuda` extra
    from .cube.runtime.nvrtc import INSTALL, nvrtc_available  # lazy: the `cuda` extra
    for ok, why in (cuda_available(), nvrtc_available()):
        if not ok:
            hint = "" if INSTALL in why else f" (the `cuda` extra: {INSTALL}, and an NVIDIA GPU)"
            raise DeviceUnavailableError(f"{device!r} is unavailable: {why}{hint}")
    try:
        runtime = cuda_runtime(device.index)
    except (CudaError, DeviceUnavailableError) as e:
        raise DeviceUnavailableError(f"{device!r} is unavailable: {e}") from None
    from .backend.cube import CubeBackend  # lazy: a backend loads on its device's first use
    return CubeBackend(runtime)


def _cube_wgpu(device: Device):
    """Cube(wgpu) on adapter `device.index` of `ember.cube.runtime.wgpu.adapters()` (best first), or
    `DeviceUnavailableError` naming the `wgpu` extra or the missing adapter."""
    if importlib.util.find_spec("wgpu") is None:
        from .cube.runtime.wgpu import INSTALL  # lazy: the cube runtimes load on a device's first use
        raise DeviceUnavailableError(f"{device!r} is unavailable: the WGPU backend needs wgpu-py: {INSTALL}")
    from .cube.runtime.wgpu import wgpu_available, wgpu_runtime  # lazy: the `wgpu` extra
    ok, why = wgpu_available()
    if not ok:
        raise DeviceUnavailableError(f"{device!r} is unavailable: {why}")
    try:
        runtime = wgpu_runtime(device.index)
    except DeviceUnavailableError as e:
        raise DeviceUnavailableError(f"{device!r} is unavailable: {e}") from None
    from .backend.cube import CubeBackend  # lazy: a backend loads on its device's first use
    return CubeBackend(runtime)


def _fused(backend):
    """`backend` under the fusion decorator, unless `[fusion] enabled` / `EMBER_FUSION` says no."""
    from .settings import settings  # lazy: ember.toml's reader loads on first use, not at import ember
    if not settings().get("fusion", "enabled"):
        return backend
    from .backend.fusion import Fusion  # lazy: a backend loads on its device's first use
    return Fusion(backend)


def _cube_cpu(device: Device):
    """The Cube(cpu) backend, or `DeviceUnavailableError` saying which compiler is missing."""
    from . import cube  # lazy: the kernel library and its compilers load on a device's first use
    ok, why = cube.cpu_available()
    if not ok:
        raise DeviceUnavailableError(
            f"{device!r} is unavailable: its Cube(cpu) backend compiles kernels to C with OpenMP and "
            f"needs a C compiler (looked for `[compilation] compiler` / EMBER_CC, gcc, clang): {why}; "
            f"Device.numpy() works everywhere")
    from .backend.cube import CubeBackend  # lazy: a backend loads on its device's first use
    from .cube.runtime.cpu import cpu_runtime
    return CubeBackend(cpu_runtime())
