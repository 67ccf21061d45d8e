"""The torch backend (`Device.torch(spec)`): ember's primitives executed by PyTorch on any device torch
drives, "cpu", "cuda:0" (ROCm builds too), "mps", "xpu", with no fusion (ember's autodiff goes on top
with `.autodiff()`). The rows live by op family (`elementwise`, `reduce`, `movement`, `indexing`, `nn`,
`creation`), merged in `table`; docs/backends.md lists what runs where and what falls back.

Example:
    >>> x = ember.ones(3, device=Device.torch("cpu"))
    >>> (x + 1).numpy()
    array([2., 2., 2.], dtype=float32)
"""

from __future__ import annotations

import importlib.util

from ...errors import DeviceError, DeviceUnavailableError

INSTALL = ("pip install torch (a CUDA, ROCm or XPU build from https://pytorch.org/get-started/locally/ "
           "for a GPU)")
_ACCELERATORS = ("cuda", "xpu", "mps")  # torch device types listed as available, after "cpu"


def available() -> list[str]:
    """The torch device strings usable here, as `Device.torch` takes them: "cpu" first, then each GPU.

    Example:
        >>> available()
        ['cpu', 'cuda:0']
    """
    import torch
    found = ["cpu"]
    for kind in _ACCELERATORS:
        module = getattr(torch, kind, None)
        if module is not None and module.is_available():
            count = module.device_count() if hasattr(module, "device_count") else 1
            found += [kind] if kind == "mps" else [f"{kind}:{i}" for i in range(count)]
    return found


def torch_backend(device):
    """The `TorchBackend` of a `Device.torch(...)` device, or `DeviceUnavailableError` naming torch (not
    installed) or the devices torch reports available (an unknown or absent device)."""
    spec = device.torch_spec
    if importlib.util.find_spec("torch") is None:
        raise DeviceUnavailableError(f"{device!r} is unavailable: the torch backend needs PyTorch: {INSTALL}")
    import torch
    try:
        where = torch.device(spec)
    except RuntimeError as e:
        raise DeviceError(f"{device!r}: torch does not know the device {spec!r} ({e}); torch reports "
                          f"available: {', '.join(available())}") from None
    if where.type == "meta":
        raise DeviceError(f"{device!r}: torch's meta device holds no values; torch reports available: "
                          f"{', '.join(available())}")
    module = getattr(torch, where.type, None)
    if where.type != "cpu" and hasattr(module, "is_available") and not module.is_available():
        raise DeviceUnavailableError(f"{device!r} is unavailable: torch {torch.__version__} has no {where.type!r} "
                                     f"device here; torch reports available: {', '.join(available())}")
    count = getattr(module, "device_count", None)
    if where.type not in ("cpu", "mps") and count is not None and where.index is not None and where.index >= count():
        raise DeviceUnavailableError(f"{device!r} is unavailable: torch sees {count()} {where.type!r} devices; "
                                     f"torch reports available: {', '.join(available())}")
    try:
        torch.zeros(1, device=where)
    except (RuntimeError, AssertionError, AttributeError) as e:
        raise DeviceUnavailableError(f"{device!r} is unavailable: torch {torch.__version__} cannot use {spec!r} "
                                     f"({(str(e) or type(e).__name__).splitlines()[0][:200]}); torch "
                                     f"reports available: {', '.join(available())}") from None
    from .backend import TorchBackend
    return TorchBackend(where)
