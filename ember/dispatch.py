"""Dispatch: from a device to its backend stack, and from a tensor op to that stack (the bridge).

`build_backend(device)` is the table of stacks:

    numpy            -> Numpy
    cpu              -> Fusion(Cube(cpu)) (kernels compiled to C; DeviceUnavailableError without a C
                                          compiler; plain Cube(cpu) when [fusion] enabled is false)
    X.autodiff()     -> Autodiff(stack of X)
    wgpu:i           -> Fusion(Cube(wgpu)) on adapter i (DeviceUnavailableError without wgpu-py or an
                                          adapter; plain Cube(wgpu) when [fusion] enabled is false)
    cuda:i           -> Fusion(Cube(cuda)) on GPU i (DeviceUnavailableError without the `cuda` extra or a
                                          GPU; plain Cube(cuda) when [fusion] enabled is false)

`bind(prim, inputs, params)` is the one path every tensor op takes: it checks that the inputs share a
device (lifting a plain tensor onto the autodiff variant of its own device, so `w - lr * grad` works),
runs the primitive's shape rule, and asks the device's backend to execute.

Example:
    >>> bind(registry["exp"], (x,), {})        # what x.exp() does
"""

from __future__ import annotations

import importlib.util

from .device import Device
from .errors import DeviceError, DeviceUnavailableError
from .ops.primitive import Primitive


def build_backend(device: Device):
    """The backend stack of `device`; raises `DeviceUnavailableError` when it cannot run here."""
    if device.is_autodiff:
        from .autodiff.backend import Autodiff
        inner = device.inner
        return Autodiff(inner.backend, inner, device.checkpointing)
    if device.kind == "numpy":
        from .backend.numpy import NumpyBackend
        return NumpyBackend()
    if device.kind == "cpu":
        return _fused(_cube_cpu(device))
    if device.kind == "wgpu":
        return _fused(_cube_wgpu(device))
    return _fused(_cube_cuda(device))  # cuda, the last of device.KINDS


def _cube_cuda(device: Device):
    """Cube(cuda) on GPU `device.index` (kernels rendered to CUDA C, compiled by NVRTC, run through the
    driver API), or `DeviceUnavailableError` naming the `cuda` extra, the driver or the GPU missing."""
    from .cube.runtime.cuda import CudaError, cuda_available, cuda_runtime
    from .cube.runtime.nvrtc import INSTALL, nvrtc_available
    for ok, why in (cuda_available(), nvrtc_available()):
        if not ok:
            hint = "" if INSTALL in why else f" (the `cuda` extra: {INSTALL}, and an NVIDIA GPU)"
            raise DeviceUnavailableError(f"{device!r} is unavailable: {why}{hint}; available: {available_devices()}")
    try:
        runtime = cuda_runtime(device.index)
    except (CudaError, DeviceUnavailableError) as e:
        raise DeviceUnavailableError(f"{device!r} is unavailable: {e}; available: {available_devices()}") from None
    from .backend.cube import CubeBackend
    return CubeBackend(runtime)


def _cube_wgpu(device: Device):
    """Cube(wgpu) on adapter `device.index` of `ember.cube.runtime.wgpu.adapters()` (best first), or
    `DeviceUnavailableError` naming the `wgpu` extra or the missing adapter."""
    if importlib.util.find_spec("wgpu") is None:
        from .cube.runtime.wgpu import INSTALL
        raise DeviceUnavailableError(f"{device!r} is unavailable: the WGPU backend needs wgpu-py: {INSTALL}; "
                                     f"available: {available_devices()}")
    from .cube.runtime.wgpu import wgpu_available, wgpu_runtime
    ok, why = wgpu_available()
    if not ok:
        raise DeviceUnavailableError(f"{device!r} is unavailable: {why}; available: {available_devices()}")
    try:
        runtime = wgpu_runtime(device.index)
    except DeviceUnavailableError as e:
        raise DeviceUnavailableError(f"{device!r} is unavailable: {e}; available: {available_devices()}") from None
    from .backend.cube import CubeBackend
    return CubeBackend(runtime)


def _fused(backend):
    """`backend` under the fusion decorator, unless `[fusion] enabled` / `EMBER_FUSION` says no."""
    from .settings import settings
    if not settings().get("fusion", "enabled"):
        return backend
    from .backend.fusion import Fusion
    return Fusion(backend)


def _cube_cpu(device: Device):
    """The Cube(cpu) backend, or `DeviceUnavailableError` saying which compiler is missing."""
    from . import cube
    ok, why = cube.cpu_available()
    if not ok:
        raise DeviceUnavailableError(
            f"{device!r} is unavailable: its Cube(cpu) backend compiles kernels to C with OpenMP and "
            f"needs a C compiler (looked for `[compilation] compiler` / EMBER_CC, gcc, clang): {why}; "
            f"Device.numpy() works everywhere; available: {available_devices()}")
    from .backend.cube import CubeBackend
    return CubeBackend()


def available_devices() -> list[Device]:
    """Devices whose backend runs on this machine, best first (cuda:0 when a GPU, its driver and NVRTC
    are here; cpu only when a C compiler builds kernels)."""
    from . import cube
    from .cube.runtime.cuda import cuda_available
    from .cube.runtime.nvrtc import nvrtc_available
    gpu = [Device.cuda(0)] if cuda_available()[0] and nvrtc_available()[0] else []
    return gpu + ([Device.cpu(), Device.numpy()] if cube.cpu_available()[0] else [Device.numpy()])


def wgpu_devices() -> tuple[list[Device], list[Device]]:
    """(hardware, software) wgpu devices, one per adapter of `ember.cube.runtime.wgpu.adapters()`; both
    empty without wgpu-py or an adapter."""
    from .cube.runtime.wgpu import listed_adapters, wgpu_available
    if importlib.util.find_spec("wgpu") is None or not wgpu_available()[0]:
        return [], []
    found = listed_adapters()
    return ([Device.wgpu(a.index) for a in found if a.kind != "CPU"],
            [Device.wgpu(a.index) for a in found if a.kind == "CPU"])


def _unify(prim_name: str, inputs: tuple) -> tuple[Device, tuple]:
    """The one device `inputs` can meet on, and the inputs on it.

    Plain tensors meet the autodiff variant of their own device by being lifted (no copy); anything
    else is an error naming the devices.
    """
    target = next((t._device for t in inputs if t._device.is_autodiff), inputs[0]._device)
    for t in inputs:
        d = t._device
        if d.inner is not target.inner or (d.is_autodiff and d is not target):
            devices = sorted({repr(t._device) for t in inputs})
            why = ("autodiff devices with different checkpointing" if d.inner is target.inner
                   else "different devices")
            raise DeviceError(f"{prim_name}: tensors are on {why}, {' and '.join(devices)}; "
                              f"move them with .to(device)")
    backend = target._backend or target.backend
    return target, tuple(t if t._device is target else
                         Tensor._make(target, backend.lift(t._handle, t._aval), t._aval) for t in inputs)


def bind(prim: Primitive, inputs: tuple, params: dict):
    """Apply `prim` to tensors `inputs` with `params`; the result is a tensor on their device."""
    if len(inputs) == 2:  # the common binary op, without the loop and the two comprehensions' frames
        a, b = inputs
        device = a._device
        if b._device is not device:
            device, (a, b) = _unify(prim.name, inputs)
        aval = prim.infer(a._aval, b._aval, **params)
        handles = [a._handle, b._handle]
    elif len(inputs) == 1:  # views, unary ops and reductions: no loop either
        a, = inputs
        device = a._device
        aval = prim.infer(a._aval, **params)
        handles = [a._handle]
    else:
        device = inputs[0]._device
        for t in inputs:
            if t._device is not device:
                device, inputs = _unify(prim.name, inputs)
                break
        aval = prim.infer(*[t._aval for t in inputs], **params)
        handles = [t._handle for t in inputs]
    backend = device._backend or device.backend
    handle = backend.execute(prim, handles, params, aval)
    out = _new(Tensor)  # Tensor._make's work without its frame (the dispatch hot path)
    out._device, out._handle, out._aval = device, handle, aval
    return out


_new = object.__new__


def create(device: Device, prim: Primitive, params: dict):
    """Run a creation primitive (no tensor inputs) on `device`."""
    aval = prim.infer(**params)
    return Tensor._make(device, device.backend.execute(prim, [], params, aval), aval)


def value_bounds(tensor) -> tuple[int, int] | None:
    """(min, max) of an integer tensor's values when its backend knows them without waiting for a device
    (data uploaded from the host keeps the bounds of that data), else None: a check of index values
    reads them (and waits for the work queued before) only when this says nothing.

    Example:
        >>> value_bounds(ember.tensor([3, 1, 2], device=Device.cuda(0)))
        (1, 3)
    """
    return tensor._device.backend.value_bounds(tensor._handle)


def transfer(tensor, device: Device):
    """`tensor` on `device`: free between a device and its autodiff variant, else through the host."""
    source = tensor._device
    if source is device:
        return tensor
    if source.inner is device.inner:
        if device.is_autodiff and not source.is_autodiff:
            return Tensor._make(device, device.backend.lift(tensor._handle, tensor._aval), tensor._aval)
        if source.is_autodiff and not device.is_autodiff:
            return Tensor._make(device, tensor._handle.primal, tensor._aval)
        return Tensor._make(device, device.backend.lift(tensor._handle.primal, tensor._aval), tensor._aval)
    array = source.backend.to_host(tensor._handle)
    return Tensor._make(device, device.backend.from_host(array), tensor._aval)


from .tensor import Tensor  # noqa: E402  (tensor.py imports this module's functions lazily)
